//go:build !linux

package sdnotify

func monotonicUsec() int64 { return 0 }
