#!/usr/bin/env bash
# What the test suite needs besides PyPI, from Debian: a JDK 17 and Maven (the suite fetches Apache
# Kafka's release jars and Spark's Kafka connector from Maven Central on its first run, and javac
# builds one shim class for Kafka 4.4's own tiered storage), kcat (a client the tests read through
# the proxy with), docker-compose (validates compose/docker-compose.yml; no engine needed), and
# Chromium with its WebDriver (the status page is tested in a headless browser, driven by selenium
# through Debian's chromedriver, never one selenium would download).
# Installs whatever is missing when run as root; otherwise prints the command and fails.
set -euo pipefail
missing=()
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "the tests need: ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
    exit 1
fi
echo "installing from Debian: ${missing[*]}" >&2
apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${missing[@]}" >/dev/null; }
