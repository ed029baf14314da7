package app

// bindReactions binds the favorites and likes routes and the counter
// processor.
func bindReactions(d *Deps) {
}
