# Sync engines for the integration tests and scripts/bench: two Syncthing instances on
# 127.0.0.1, and a local bare git repository with clones. Source after lib.sh (it uses
# $TEST_ROOT and on_exit):
#
#     st_start a && st_start b && st_pair a b && st_share kc a "$DIR_A" b "$DIR_B"
#     echo x >"$DIR_A/f"; wait_for 20 cmp -s "$DIR_A/f" "$DIR_B/f"
#     git_remote "$TEST_ROOT/git" a b    # remote.git, a/ and b/, each clone with an identity
#
# Each instance has its own home under $TEST_ROOT/syncthing and its own ports, and reaches
# nothing beyond 127.0.0.1: global and local discovery, relays, NAT traversal, usage and crash
# reporting, upgrades and the browser launch are off from its first start. It is killed at exit
# by its PID; its home goes with $TEST_ROOT.

ST_ROOT="$TEST_ROOT/syncthing"

# wait_for SECONDS CMD...: runs CMD every 0.1 s until it succeeds (0) or SECONDS have passed (1).
wait_for() {
    wf_deadline=$(($(date +%s) + $1))
    shift
    while :; do
        "$@" >/dev/null 2>&1 && return 0
        [ "$(date +%s)" -ge "$wf_deadline" ] && return 1
        sleep 0.1
    done
}

# now_ms: the time in milliseconds (for the seconds a change took, printed with the checks).
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# since_ms T0: seconds since T0 (from now_ms), to the millisecond.
since_ms() { t=$(($(now_ms) - $1)); printf '%d.%03d s' $((t / 1000)) $((t % 1000)); }

# free_ports N: N TCP ports on 127.0.0.1 that were free a moment ago, held together while they
# are picked so that they differ.
free_ports() {
    /usr/bin/python3 - "$1" <<'PY'
import socket, sys
held = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    held.append(s)
print(" ".join(str(s.getsockname()[1]) for s in held))
PY
}

# st_home NAME: the instance's home (config, keys, database, log).
st_home() { printf '%s' "$ST_ROOT/$1"; }
st_id() { cat "$ST_ROOT/$1/device-id"; }
st_listen() { cat "$ST_ROOT/$1/listen-port"; }
st_pid() { cat "$ST_ROOT/$1/pid"; }

# st_start NAME: generates a device key and configuration for instance NAME, starts it and
# waits (up to 30 s) until its REST API answers. Returns 1, with the log shown, if it does not.
st_start() {
    ss_home="$ST_ROOT/$1"
    mkdir -p "$ss_home"
    if ! syncthing generate --home="$ss_home" --no-default-folder >"$ss_home/generate.log" 2>&1; then
        fail "syncthing generate ($1)" "$(tail -5 "$ss_home/generate.log")"
        return 1
    fi
    set -- "$1" $(free_ports 2)
    apikey=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
    # What is set before the first start, so that not even the first second reaches outside:
    # the GUI and the listener on loopback ports of our own, no discovery, relays, NAT, usage
    # or crash reports, upgrade checks or browser.
    sed -i \
        -e "s|<address>127.0.0.1:8384</address>|<address>127.0.0.1:$2</address>|" \
        -e "s|<apikey>[^<]*</apikey>|<apikey>$apikey</apikey>|" \
        -e "s|<listenAddress>default</listenAddress>|<listenAddress>tcp://127.0.0.1:$3</listenAddress>|" \
        -e "s|<globalAnnounceEnabled>true<|<globalAnnounceEnabled>false<|" \
        -e "s|<localAnnounceEnabled>true<|<localAnnounceEnabled>false<|" \
        -e "s|<relaysEnabled>true<|<relaysEnabled>false<|" \
        -e "s|<natEnabled>true<|<natEnabled>false<|" \
        -e "s|<startBrowser>true<|<startBrowser>false<|" \
        -e "s|<urAccepted>0<|<urAccepted>-1<|" \
        -e "s|<autoUpgradeIntervalH>12<|<autoUpgradeIntervalH>0<|" \
        -e "s|<crashReportingEnabled>true<|<crashReportingEnabled>false<|" \
        -e "s|<reconnectionIntervalS>60<|<reconnectionIntervalS>1<|" \
        "$ss_home/config.xml"
    # A syncthing whose defaults changed would keep one of them silently: each must be there.
    for want in "<address>127.0.0.1:$2</address>" "<listenAddress>tcp://127.0.0.1:$3</listenAddress>" \
        "<globalAnnounceEnabled>false<" "<localAnnounceEnabled>false<" "<relaysEnabled>false<" \
        "<natEnabled>false<" "<startBrowser>false<" "<urAccepted>-1<" "<autoUpgradeIntervalH>0<" \
        "<crashReportingEnabled>false<"; do
        if ! grep -qF "$want" "$ss_home/config.xml"; then
            fail "syncthing config ($1) has $want" "the generated config.xml changed form"
            return 1
        fi
    done
    printf '%s\n' "$2" >"$ss_home/gui-port"
    printf '%s\n' "$3" >"$ss_home/listen-port"
    printf '%s\n' "$apikey" >"$ss_home/apikey"
    syncthing serve --home="$ss_home" --device-id >"$ss_home/device-id" 2>/dev/null
    # serve runs a monitor that starts syncthing again as its child, even with --no-restart;
    # STMONITORED (what the monitor sets for that child) makes it one process, killed by its
    # PID at exit, and none is left behind when that kill ends in SIGKILL.
    STNODEFAULTFOLDER=1 STNOUPGRADE=1 STNORESTART=1 STMONITORED=yes syncthing serve --home="$ss_home" \
        --no-browser --no-restart --no-upgrade --no-default-folder --logflags=3 \
        >"$ss_home/log" 2>&1 &
    printf '%s\n' $! >"$ss_home/pid"
    on_exit_kill $!
    sleep 0.2
    if [ -n "$(cat /proc/$!/task/*/children 2>/dev/null)" ]; then
        fail "syncthing $1 runs as one process" "it started children: $(cat /proc/$!/task/*/children)"
        return 1
    fi
    if ! wait_for 30 st_rest "$1" GET system/ping; then
        fail "syncthing $1 answers on 127.0.0.1:$2" "$(tail -20 "$ss_home/log")"
        return 1
    fi
}

# st_rest NAME METHOD PATH [JSON]: a REST call to instance NAME; the answer on stdout. Fails
# (non-zero) on any HTTP error.
st_rest() {
    sr_home="$ST_ROOT/$1"
    curl -sSf --max-time 10 -X "$2" -H "X-API-Key: $(cat "$sr_home/apikey")" \
        ${4:+-H "Content-Type: application/json" --data "$4"} \
        "http://127.0.0.1:$(cat "$sr_home/gui-port")/rest/$3"
}

# st_json NAME PATH EXPR: GETs PATH and prints EXPR (python, over the parsed answer `j`).
st_json() {
    st_rest "$1" GET "$2" | /usr/bin/python3 -c "import json, sys; j = json.load(sys.stdin); print($3)"
}

# st_pair A B: each instance knows the other by device id, at its loopback listener.
st_pair() {
    st_rest "$1" POST config/devices "{\"deviceID\": \"$(st_id "$2")\", \"name\": \"$2\",
        \"addresses\": [\"tcp://127.0.0.1:$(st_listen "$2")\"]}" >/dev/null &&
        st_rest "$2" POST config/devices "{\"deviceID\": \"$(st_id "$1")\", \"name\": \"$1\",
        \"addresses\": [\"tcp://127.0.0.1:$(st_listen "$1")\"]}" >/dev/null &&
        wait_for 30 st_connected "$1" "$2"
}

# st_connected A B: instance A has a live connection to B.
st_connected() {
    [ "$(st_json "$1" system/connections "j['connections']['$(st_id "$2")']['connected']")" = True ]
}

# st_share FOLDER A DIR_A B DIR_B: folder id FOLDER, at DIR_A on A and DIR_B on B, shared
# between the two, watched (changes scanned after 1 s), and waits until both have scanned it.
st_share() {
    fid=$1
    shift
    while [ $# -ge 4 ]; do
        st_share_one "$fid" "$1" "$2" "$3" || return 1
        st_share_one "$fid" "$3" "$4" "$1" || return 1
        wait_for 30 st_idle "$1" "$fid" && wait_for 30 st_idle "$3" "$fid" || return 1
        shift 4
    done
}

st_share_one() {
    mkdir -p "$3"
    st_rest "$2" POST config/folders "{\"id\": \"$1\", \"label\": \"$1\", \"path\": \"$3\",
        \"type\": \"sendreceive\", \"fsWatcherEnabled\": true, \"fsWatcherDelayS\": 1,
        \"rescanIntervalS\": 3600,
        \"devices\": [{\"deviceID\": \"$(st_id "$2")\"}, {\"deviceID\": \"$(st_id "$4")\"}]}" >/dev/null
}

# st_idle NAME FOLDER: the folder is scanned and has nothing left to pull.
st_idle() {
    [ "$(st_json "$1" "db/status?folder=$2" "j['state'] == 'idle' and j['needTotalItems'] == 0")" = True ]
}

# st_scan NAME FOLDER: scans the folder now rather than after the watcher's delay.
st_scan() { st_rest "$1" POST "db/scan?folder=$2" >/dev/null; }

# st_in_sync A B FOLDER: both are idle and A's view of B's completion of FOLDER is 100 %, at the
# same global sequence on both (so neither has news the other lacks).
st_in_sync() {
    st_idle "$1" "$3" && st_idle "$2" "$3" &&
        [ "$(st_json "$1" "db/completion?folder=$3&device=$(st_id "$2")" "j['completion'] == 100 and j['needItems'] == 0 and j['needDeletes'] == 0")" = True ] &&
        [ "$(st_json "$1" "db/status?folder=$3" "j['globalFiles'], j['globalDeleted'], j['globalBytes']")" = \
            "$(st_json "$2" "db/status?folder=$3" "j['globalFiles'], j['globalDeleted'], j['globalBytes']")" ]
}

# same_tree DIR1 DIR2: the same files with the same contents, leaving out the engines' own
# (Syncthing's marker and temporary files, git's directory).
same_tree() {
    diff -r -x .stfolder -x '.syncthing.*.tmp' -x '~syncthing~*.tmp' -x .stversions -x .git "$1" "$2"
}

# git_remote DIR NAME...: a bare repository DIR/remote.git (branch main) and a clone of it at
# DIR/NAME for each NAME, each with its own committer identity. Prints nothing.
git_remote() {
    gr_dir=$1
    shift
    mkdir -p "$gr_dir"
    git init -q --bare -b main "$gr_dir/remote.git" || return 1
    for gr_name in "$@"; do
        git clone -q "$gr_dir/remote.git" "$gr_dir/$gr_name" 2>/dev/null || return 1
        git -C "$gr_dir/$gr_name" config user.name "$gr_name" &&
            git -C "$gr_dir/$gr_name" config user.email "$gr_name@keychainfs.test" &&
            git -C "$gr_dir/$gr_name" checkout -q -b main 2>/dev/null || return 1
    done
}
