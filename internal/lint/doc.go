// Package lint holds the project's house rules as ordinary tests: the
// layering (cmd -> fusefs -> control -> engine <- backends)
// and where unsafe, giouring and purego may be imported.
package lint
