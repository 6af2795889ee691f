package settings

// Given reports whether name was given on the command line.
func (s *Set) Given(name string) bool {
	st, ok := s.byName[name]
	return ok && st.set
}

// Problems splits what Resolve returned into its *Errors.
func Problems(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if e, ok := err.(*Error); ok {
			out = append(out, e)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}
