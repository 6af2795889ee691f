package connlimit

// AdmitReporting is Admit with the release AdmitHandshake returns, which
// says whether the handshake succeeded.
func (l *Limiter) AdmitReporting() (release func(ok bool), err error) {
	start, err := l.admit()
	if err != nil {
		return nil, err
	}
	return l.releaser(start), nil
}
