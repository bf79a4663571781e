"""GraphQL API over the scholarly citation graph."""
