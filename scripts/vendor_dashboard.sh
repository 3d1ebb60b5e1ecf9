#!/usr/bin/env bash
# Fetch the dashboard's vendored front-end libraries from the npm registry into
# trioqueue/dashboard/static/vendor/ (release files and licences, committed: the broker
# serves them itself and needs no network at run time).
#
#   preact 11.2.0 (MIT)   the view layer          dist/preact.mjs, hooks/dist/hooks.mjs
#   htm 3.1.1 (Apache-2)  JSX-like templates      dist/htm.mjs (no build step)
#   uplot 1.6.32 (MIT)    the throughput chart    dist/uPlot.esm.js, dist/uPlot.min.css
#
# The one change to a release file: hooks.mjs imports "preact" by its bare name, which a
# browser resolves only through an import map; it is pointed at ./preact.mjs instead, so
# the page needs no inline script (its Content-Security-Policy allows 'self' only).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=trioqueue/dashboard/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent preact@11.2.0 htm@3.1.1 uplot@1.6.32 >/dev/null)
for tgz in "$work"/*.tgz; do
    name=$(basename "$tgz" .tgz)
    mkdir -p "$work/$name" && tar -xzf "$tgz" -C "$work/$name"
done
mkdir -p "$dest"
cp "$work"/preact-11.2.0/package/dist/preact.mjs "$work"/preact-11.2.0/package/hooks/dist/hooks.mjs \
   "$work"/htm-3.1.1/package/dist/htm.mjs "$work"/uplot-1.6.32/package/dist/uPlot.esm.js \
   "$work"/uplot-1.6.32/package/dist/uPlot.min.css "$dest"/
cp "$work"/preact-11.2.0/package/LICENSE "$dest"/LICENSE.preact
cp "$work"/htm-3.1.1/package/LICENSE "$dest"/LICENSE.htm
cp "$work"/uplot-1.6.32/package/LICENSE "$dest"/LICENSE.uplot
sed -i 's/from"preact"/from".\/preact.mjs"/g' "$dest"/hooks.mjs
echo "vendored into $dest"
