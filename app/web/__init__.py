"""The web face: record JSON and HTML pages, GraphiQL from vendored files."""
