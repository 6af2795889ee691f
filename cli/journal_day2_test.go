package cli

import (
	"strings"
	"testing"
	"time"
)

// The monitoring verdict of pact journal status: the most severe problem
// decides the exit code, and every problem is named.
func TestQuorumVerdict(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	voter := func(id string) JournalMemberView {
		return JournalMemberView{JournalID: id, Voter: true, Reachable: true, State: "follower"}
	}
	learner := func(id string, since time.Duration, reachable bool) JournalMemberView {
		return JournalMemberView{JournalID: id, Reachable: reachable, nonvoterSince: now.Add(-since), Lag: 500}
	}
	down := voter("j3")
	down.Reachable = false
	halted := voter("j2")
	halted.Halted = "stopped applying the log at entry 9"
	lagging := voter("j2")
	lagging.Lag = 5000
	chk := quorumCheck{maxLag: 1000, stuckAfter: 5 * time.Minute}
	tests := []struct {
		name    string
		v       QuorumView
		want    int
		mention []string
	}{
		{"healthy", QuorumView{LeaderID: "j1", Members: []JournalMemberView{voter("j1"), voter("j2"), voter("j3")}}, ExitOK, nil},
		{"learner catching up", QuorumView{LeaderID: "j1", Members: []JournalMemberView{voter("j1"), learner("j4", time.Minute, true)}}, ExitOK, nil},
		{"learner stuck", QuorumView{LeaderID: "j1", Members: []JournalMemberView{voter("j1"), learner("j4", 10*time.Minute, true)}}, ExitQuorumLearnerStuck, []string{"non-voter j4 is stuck", "500 entries behind", "pact journal remove j4"}},
		{"learner unreachable", QuorumView{LeaderID: "j1", Members: []JournalMemberView{voter("j1"), learner("j4", time.Second, false)}}, ExitQuorumLearnerStuck, []string{"j4 is stuck (unreachable)"}},
		{"voter down", QuorumView{LeaderID: "j1", Members: []JournalMemberView{voter("j1"), voter("j2"), down}}, ExitQuorumDegraded, []string{"voter j3 is unreachable"}},
		{"voter halted", QuorumView{LeaderID: "j1", Members: []JournalMemberView{voter("j1"), halted}}, ExitQuorumDegraded, []string{"voter j2 is halted: stopped applying"}},
		{"voter lagging", QuorumView{LeaderID: "j1", Members: []JournalMemberView{voter("j1"), lagging}}, ExitQuorumDegraded, []string{"voter j2 lags 5000 entries"}},
		{"degraded beats stuck", QuorumView{LeaderID: "j1", Members: []JournalMemberView{voter("j1"), down, learner("j4", time.Hour, true)}}, ExitQuorumDegraded, []string{"j3", "j4"}},
		{"no leader beats all", QuorumView{ServedBy: "j2", Members: []JournalMemberView{voter("j2"), down}}, ExitQuorumNoLeader, []string{"no leader as seen by j2", "j3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := chk.verdict(tt.v, now)
			if got := ExitCode(err); got != tt.want {
				t.Fatalf("exit %d, want %d (%v)", got, tt.want, err)
			}
			for _, m := range tt.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%q lacks %q", err, m)
				}
			}
		})
	}
}
