#!/usr/bin/env bash
# Install the headless browser the browser test drives (Debian's chromium), only if it is missing.
# Root only: the test calls this from its fixture when it runs as root; elsewhere ask an admin for
#   apt-get install -y --no-install-recommends chromium
# chromium-driver is not needed: the test speaks the DevTools protocol to chromium directly.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install_browser: chromium is missing and this is not root; run as root:" >&2
  echo "  apt-get install -y --no-install-recommends chromium" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "install_browser: $(chromium --version 2>/dev/null || echo 'chromium installed')"
