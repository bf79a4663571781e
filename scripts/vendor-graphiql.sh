#!/usr/bin/env bash
# Fetch GraphiQL and React from the npm registry and copy the browser builds (with their licences)
# into app/web/static/vendor, so the GraphiQL page works with no internet access.
# Same packages and versions as Strawberry's built-in page; re-run to update, then commit the files.
set -euo pipefail
cd "$(dirname "$0")/.."
out=app/web/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
packages=(react@18.2.0 react-dom@18.2.0 graphiql@3.8.3)
(cd "$work" && npm pack --silent "${packages[@]}" >/dev/null)
for tgz in "$work"/*.tgz; do
  name=$(basename "$tgz" .tgz)
  mkdir -p "$work/$name" && tar xzf "$tgz" -C "$work/$name"
done
rm -rf "$out" && mkdir -p "$out"
cp "$work"/react-18.2.0/package/umd/react.production.min.js "$out/"
cp "$work"/react-dom-18.2.0/package/umd/react-dom.production.min.js "$out/"
cp "$work"/graphiql-3.8.3/package/graphiql.min.js "$work"/graphiql-3.8.3/package/graphiql.min.css "$out/"
cp "$work"/react-18.2.0/package/LICENSE "$out/LICENSE.react"
cp "$work"/react-dom-18.2.0/package/LICENSE "$out/LICENSE.react-dom"
cp "$work"/graphiql-3.8.3/package/LICENSE "$out/LICENSE.graphiql"
printf '%s\n' "${packages[@]}" > "$out/VERSIONS"
ls -la "$out"
