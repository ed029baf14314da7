package docs

// Page returns the page s serves at /docs once its assets are installed.
func Page(s *Server) string { return string(s.page) }
