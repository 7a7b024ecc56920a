#!/bin/sh
# Sync through real engines: two Syncthing instances on 127.0.0.1 and a local bare git
# repository (Tests/integration/sync_engines.sh). First the engines alone, on plain files, so a
# failure of the harness is told apart from one of keychainfs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sync_engines.sh"

have syncthing || finish
have curl || finish
have git || finish

# --- Syncthing alone, plain files -------------------------------------------------------------
PLAIN_A="$TEST_ROOT/plain-a"
PLAIN_B="$TEST_ROOT/plain-b"
t0=$(now_ms)
if st_start a && st_start b && st_pair a b && st_share plain a "$PLAIN_A" b "$PLAIN_B"; then
    pass "two Syncthing instances started, paired and sharing a folder ($(since_ms $t0))"
    for inst in a b; do
        pid=$(st_pid $inst)
        # Nothing listens beyond loopback: the instance's listening sockets (TCP and UDP) are
        # its GUI and its listener, both on 127.0.0.1.
        listening=$(ss -Htlnup | grep "pid=$pid," | awk '{print $5}' | sort | tr '\n' ' ')
        expect_eq "$(printf '127.0.0.1:%s\n' "$(cat "$(st_home $inst)/gui-port")" "$(st_listen $inst)" | sort | tr '\n' ' ')" \
            "$listening" "Syncthing $inst listens on its two 127.0.0.1 ports only"
        expect_eq "False False False False" \
            "$(st_json $inst config/options "j['globalAnnounceEnabled'], j['localAnnounceEnabled'], j['relaysEnabled'], j['natEnabled']")" \
            "Syncthing $inst: global and local discovery, relays and NAT off"
        expect_eq "False -1 False" \
            "$(st_json $inst config/options "j['startBrowser'], j['urAccepted'], j['crashReportingEnabled']")" \
            "Syncthing $inst: no browser, no usage or crash reports"
    done

    printf 'one\n' >"$PLAIN_A/f"
    t0=$(now_ms)
    if wait_for 20 cmp -s "$PLAIN_A/f" "$PLAIN_B/f"; then
        pass "a new file on A reaches B ($(since_ms $t0))"
    else
        fail "a new file on A reaches B within 20 s" "$(ls -la "$PLAIN_B")"
    fi
    mkdir -p "$PLAIN_B/dir"
    printf 'two\n' >"$PLAIN_B/dir/g"
    printf 'one, changed\n' >"$PLAIN_B/f"
    t0=$(now_ms)
    if wait_for 20 same_tree "$PLAIN_A" "$PLAIN_B"; then
        pass "a change and a new directory on B reach A ($(since_ms $t0))"
    else
        fail "a change and a new directory on B reach A within 20 s" "$(same_tree "$PLAIN_A" "$PLAIN_B")"
    fi
    rm "$PLAIN_A/f"
    t0=$(now_ms)
    if wait_for 20 test ! -e "$PLAIN_B/f"; then
        pass "a delete on A reaches B ($(since_ms $t0))"
    else
        fail "a delete on A reaches B within 20 s"
    fi
    for inst in a b; do
        # After the exchanges: every socket of the instance, in any state, is between loopback
        # addresses (its peer's, never a discovery server, relay, STUN or usage server).
        sockets=$(ss -Htunap | grep "pid=$(st_pid $inst),")
        outside=$(printf '%s\n' "$sockets" | awk 'NF {print $5, $6}' | tr ' ' '\n' | grep -v -e '^127\.0\.0\.1:' -e '^0\.0\.0\.0:\*$' -e '^\*$')
        if [ -n "$sockets" ] && [ -z "$outside" ]; then
            pass "Syncthing $inst talks to loopback only"
        else
            fail "Syncthing $inst talks to loopback only" "$sockets"
        fi
    done
    if wait_for 20 st_in_sync a b plain; then
        pass "both instances report the folder in sync"
    else
        fail "both instances report the folder in sync within 20 s" \
            "$(st_rest a GET 'db/status?folder=plain')" "$(st_rest b GET 'db/status?folder=plain')"
    fi
else
    fail "two Syncthing instances started, paired and sharing a folder"
fi

# --- git alone, plain files -------------------------------------------------------------------
GIT="$TEST_ROOT/git"
if git_remote "$GIT" a b; then
    printf 'one\n' >"$GIT/a/f"
    git -C "$GIT/a" add f && git -C "$GIT/a" commit -qm one && git -C "$GIT/a" push -q origin main 2>/dev/null
    git -C "$GIT/b" pull -q origin main 2>/dev/null
    expect_eq "one" "$(cat "$GIT/b/f" 2>/dev/null)" "git: a commit pushed from clone a is pulled by clone b"
    expect_eq "b@keychainfs.test" "$(git -C "$GIT/b" config user.email)" "git: each clone has its own identity"
else
    fail "a bare git repository with two clones"
fi

finish
