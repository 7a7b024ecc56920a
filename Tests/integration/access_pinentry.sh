#!/bin/sh
# A scripted pinentry for the access prompt, speaking pinentry's Assuan protocol: OK to every
# setting; CONFIRM answered from the file `answer` beside it (ok: Allow once; notok: Always
# allow, pinentry's "not OK" button, then OK to the prompt that confirms it, which has no such
# button; cancel: Deny; hang: no answer). Each SETDESC and each CONFIRM is logged to the file
# `prompts` beside it.
dir=$(dirname "$0")
notok_button=
echo "OK scripted pinentry"
while IFS= read -r line; do
    case "$line" in
        SETDESC*) printf '%s\n' "$line" >>"$dir/prompts"; echo OK ;;
        SETNOTOK*) notok_button=1; echo OK ;;
        CONFIRM*)
            echo prompt >>"$dir/prompts"
            case "$(cat "$dir/answer")" in
                ok) echo OK ;;
                notok) if [ -n "$notok_button" ]; then echo "ERR 83886194 Not confirmed <Pinentry>"; else echo OK; fi ;;
                cancel) echo "ERR 83886179 Operation cancelled <Pinentry>" ;;
                hang) sleep 30 ;;
            esac ;;
        BYE*) echo OK; exit 0 ;;
        *) echo OK ;;
    esac
done
