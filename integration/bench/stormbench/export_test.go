package main

// The tests run a storm in their own process; the command runs its
// schedule over worker processes (workers.go).

func indices(agents []*benchAgent) []int {
	out := make([]int, len(agents))
	for i, a := range agents {
		out[i] = a.idx
	}
	return out
}

// run runs every agent of s in this process, arriving spread evenly over
// s.spread in a random order, and measures it. pids are the journal
// processes whose CPU and memory are measured.
func (s *storm) run(pids []int) *stormResult {
	res, _ := s.runArrivals(pids, schedule(indices(s.agents), s.spread))
	return res
}
