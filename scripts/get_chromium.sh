#!/usr/bin/env bash
# Debian's Chromium and its WebDriver, for tests/frontends/test_browser_page.py (the page at / in a real browser,
# its microphone fed a WAV). Idempotent; the test skips with a reason where they cannot be installed.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
[ -n "$(find /var/lib/apt/lists -name '*Packages*' 2>/dev/null | head -1)" ] || apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o=Dpkg::Use-Pty=0 --no-install-recommends chromium chromium-driver >/dev/null
