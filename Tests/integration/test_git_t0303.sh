#!/bin/sh
# git's own test of external credential helpers, t0303-credential-external.sh, run against
# git-credential-keychainfs through a live mount: each of its checks is one here.
# It fetches and builds nothing: it needs git's source at the tag of the installed git (the
# test's expectations follow git's version), built as far as git's test tool (root or not,
# outside this repository):
#
#     v=$(git version | cut -d' ' -f3)
#     git clone --depth 1 -b "v$v" https://github.com/git/git /tmp/git-src
#     cd /tmp/git-src && make NO_CURL=1 NO_GETTEXT=1 NO_TCLTK=1 NO_PERL=1 NO_PYTHON=1 \
#         t/helper/test-tool GIT-BUILD-OPTIONS
#     make -C templates SHELL_PATH=/bin/sh PERL_PATH=/usr/bin/perl   # test-lib wants templates/blt
#
# then run this script (GIT_SRC_DIR=/elsewhere if it is not /tmp/git-src). Without it, it
# says so and skips. The tests run the installed git (GIT_TEST_INSTALLED), which finds the
# helper as `keychainfs` on PATH; test-lib gives them a HOME of their own, and the store and
# its mount come from KEYCHAINFS_STORE, as for any user who sets it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

GIT_SRC_DIR=${GIT_SRC_DIR:-/tmp/git-src}
GIT_HELPER_BIN=${GIT_HELPER_BIN:-$(dirname "$KEYCHAINFS_BIN")/git-credential-keychainfs}
T0303=$GIT_SRC_DIR/t/t0303-credential-external.sh
if [ ! -x "$GIT_SRC_DIR/t/helper/test-tool" ] || [ ! -f "$T0303" ]; then
    skip "git t0303" "git's source is not built at $GIT_SRC_DIR (see the top of $0 to build it)"
    finish
fi
installed=$(git version | cut -d' ' -f3)
built=$(sed -n 's/^GIT_VERSION = //p' "$GIT_SRC_DIR/GIT-VERSION-FILE" 2>/dev/null)
if [ "$installed" != "$built" ]; then
    fail "git t0303" "the source at $GIT_SRC_DIR is git $built, the installed git is $installed: check out v$installed"
    finish
fi

init_store
expect_exit 0 "mount" mount_kc "$MP"
mkdir -p "$TEST_ROOT/bin"
ln -s "$GIT_HELPER_BIN" "$TEST_ROOT/bin/git-credential-keychainfs"

# --root puts test-lib's trash directory in ours, so the source tree is only read.
(cd "$GIT_SRC_DIR/t" &&
    PATH="$TEST_ROOT/bin:$PATH" GIT_TEST_INSTALLED=$(dirname "$(command -v git)") \
    GIT_TEST_CREDENTIAL_HELPER=keychainfs sh "$T0303" --root="$TEST_ROOT/git-t") >"$OUT" 2>"$ERR"
rc=$?

# TAP: "ok N - what", "not ok N - what". Every "not ok" fails here, a known breakage git
# marks "# TODO" too: git 2.39's t0303 expects none, so one would be news.
checks=$(grep -c '^ok \|^not ok ' "$OUT")
grep '^ok ' "$OUT" >"$TEST_ROOT/oks"
while IFS= read -r line; do pass "git t0303: ${line#ok }"; done <"$TEST_ROOT/oks"
failed=$(grep '^not ok ' "$OUT")
if [ -n "$failed" ]; then
    fail "git t0303" "$(printf '%s\n' "$failed")"
    show_output
fi
expect_eq "0" "$rc" "t0303 exits 0"
# Its plan ("1..N", 12 in git 2.39 without a timeout helper) is printed at the end: a run
# that stopped early has none, or fewer checks.
plan=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$OUT" | tail -1)
if [ -z "$plan" ] || [ "$plan" -lt 12 ] || [ "$checks" -ne "$plan" ]; then
    fail "git t0303 ran $checks checks of a plan of ${plan:-none} (want all of at least 12)"
    show_output
fi
# Its clean-up erases, through the helper, what it stored for these hosts.
for host in example.com path.tld timeout.tld sso.tld; do
    expect_exit 44 "t0303 left no credential for $host" kc find-internet-password -s "$host"
done

finish
