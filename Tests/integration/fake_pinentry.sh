#!/bin/sh
# A scripted pinentry speaking the Assuan protocol: answers GETPIN from $PINENTRY_DIR/mode
# ("right": the passphrase in $PINENTRY_DIR/passphrase; "wrong"; "cancel"; "slow": cancel after 3 s), and logs every
# command it gets to $PINENTRY_DIR/log, and the descriptors it was started with to
# $PINENTRY_DIR/fds.
dir=$(dirname "$0")
mode=$(cat "$dir/mode")
# What it was given of its parent's: its standard input, then every other descriptor that
# does not name the same thing (a shell keeps copies of a redirected one), with what it names.
self=$(readlink /proc/$$/fd/0)
{
    echo "stdin -> $self"
    for fd in /proc/$$/fd/*; do t=$(readlink "$fd"); [ "$t" = "$self" ] || printf '%s -> %s\n' "${fd##*/}" "$t"; done
} >>"$dir/fds"
echo "OK Pleased to meet you"
while IFS= read -r line; do
    printf '%s\n' "$line" >>"$dir/log"
    case $line in
        GETPIN)
            case $mode in
                right) printf 'D %s\nOK\n' "$(cat "$dir/passphrase")" ;;
                wrong) printf 'D not%%25the%%0Apassphrase\nOK\n' ;;
                slow) sleep 3; echo "ERR 83886179 Operation cancelled <Pinentry>" ;;
                *) echo "ERR 83886179 Operation cancelled <Pinentry>" ;;
            esac ;;
        BYE) echo "OK closing connection"; exit 0 ;;
        *) echo OK ;;
    esac
done
