package sdnotify

// Enabled reports whether a service manager listens.
func (n Notifier) Enabled() bool { return n.Socket != "" }
