#!/usr/bin/env bash
# Renders the kernel logo PNGs from their one source, jupyter_sandbox/resources/logo-svg.svg.
# The PNGs are committed (installing the kernel needs no renderer); run this after editing the
# SVG. Needs rsvg-convert (Debian: apt-get install librsvg2-bin).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../jupyter_sandbox/resources"
for size in 32 64; do
  rsvg-convert --width "$size" --height "$size" logo-svg.svg --output "logo-${size}x${size}.png"
done
