#!/bin/sh
# Called by `make test`: make Debian's chromium and chromium-driver available for the
# browser tests (tests/browser, marker `browser`). Installs them when missing and this
# runs as root (apt-get update once, then install); otherwise says so in one line, and
# pytest skips only the `browser` tests. Never downloads a browser any other way.
command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    if apt-get update -qq >/dev/null 2>&1 \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1; then
        exit 0
    fi
    echo "moirae: could not install chromium and chromium-driver with apt-get: the browser tests are skipped"
else
    echo "moirae: chromium and chromium-driver are missing and this is not root: the browser tests are skipped (apt-get install chromium chromium-driver)"
fi
exit 0
