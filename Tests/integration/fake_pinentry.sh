#!/bin/sh
# A scripted pinentry speaking the Assuan protocol: answers GETPIN from $PINENTRY_DIR/mode
# ("right": the passphrase in $PINENTRY_DIR/passphrase; "wrong"; "cancel"; "slow": cancel after 3 s), and logs every
# command it gets to $PINENTRY_DIR/log.
dir=$(dirname "$0")
mode=$(cat "$dir/mode")
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
