#!/bin/sh
# Internet passwords under /internet: layout, ports, paths, variants, attributes, locking.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mount_lib.sh"

init_store
mount_kc "$MP" || { fail "mount" ; finish; }
I="$MP/internet"
list() { ls "$1" | tr '\n' ' ' | sed 's/ $//'; }

echo "== layout"
expect_exit 0 "mkdir -p a server and port" mkdir -p "$I/github.com/443"
sh -c "printf gh-secret > '$I/github.com/443/alice'"
expect_eq "gh-secret" "$(cat "$I/github.com/443/alice")" "write and read an internet password"
expect_eq "gh-secret" "$(kc find-internet-password -s github.com -a alice -w)" "the CLI finds it"
expect_contains "$(kc find-internet-password -s github.com -a alice)" "https" "an item made on port 443 takes https"
expect_contains "$(kc find-internet-password -s github.com -a alice)" "443" "and keeps port 443"
kc add-internet-password -s git.example.org -P 22 -r ssh -a deploy -w ssh-secret >/dev/null
expect_eq "ssh-secret" "$(cat "$I/git.example.org/22/deploy")" "add-internet-password shows up in the tree"
kc add-internet-password -s mail.example.org -P 0 -r imaps -a me -w mail-secret >/dev/null
expect_eq "mail-secret" "$(cat "$I/mail.example.org/993/me")" "port 0 is stored as the protocol's well-known port"
mkdir -p "$I/github.com/22"
expect_eq "22 443" "$(list "$I/github.com")" "a server directory lists its ports"
expect_eq "git.example.org github.com mail.example.org" "$(list "$I")" "internet/ lists servers"

echo "== ports"
for p in 0 65536 abc -1 08x 0443 00443; do
    expect_errno "port directory '$p' is EINVAL" "Invalid argument" mkdir "$I/github.com/$p"
done
expect_errno "a path through a bad port is EINVAL" "Invalid argument" cat "$I/github.com/99999/alice"
# A port written with leading zeros is no second name of the port: its items cannot be
# opened, listed or stat'ed through it.
expect_errno "a path through a port with leading zeros is EINVAL" "Invalid argument" cat "$I/github.com/0443/alice"
expect_errno "stat of a port with leading zeros is EINVAL" "Invalid argument" stat "$I/github.com/0443"
expect_eq "22 443" "$(list "$I/github.com")" "and the server still lists 22 and 443 only"
mkdir -p "$I/example.com/8443"
sh -c "printf alt > '$I/example.com/8443/alice'"
expect_contains "$(kc find-internet-password -s example.com -P 8443 -a alice)" "https" "a port without a well-known protocol takes https"
expect_eq "alt" "$(kc find-internet-password -s example.com -P 8443 -a alice -w)" "and keeps its port"
expect_exit 44 "the default port is a different item" kc find-internet-password -s example.com -P 443 -a alice

echo "== paths"
mkdir -p "$I/github.com/443/org/repo.git"
sh -c "printf deep > '$I/github.com/443/org/repo.git/bob'"
expect_eq "deep" "$(kc find-internet-password -s github.com -p org/repo.git -a bob -w)" "path segments are directories"
expect_eq "deep" "$(kc find-internet-password -s github.com -p /org//repo.git/ -a bob -w)" "paths are normalised (leading, trailing and empty segments dropped)"
kc add-internet-password -s github.com -p "/x//y/" -a carol -w normal >/dev/null
expect_eq "normal" "$(cat "$I/github.com/443/x/y/carol")" "a path given with extra slashes lands at its segments"
kc add-internet-password -s github.com -p "a%b/c.d" -a dave -w esc >/dev/null
expect_eq "esc" "$(cat "$I/github.com/443/a%25b/c.d/dave")" "path segments are escaped"
expect_eq "alice org x a%25b" "$(ls "$I/github.com/443" | sort | tr '\n' ' ' | sed 's/ $//' | awk '{print $2, $3, $4, $1}')" "a port directory holds items and path directories"

echo "== where files may not be"
expect_errno "a file directly in internet/ is EPERM" "Operation not permitted" sh -c "echo x > '$I/file'"
expect_errno "a file directly in internet/<server>/ is EPERM" "Operation not permitted" sh -c "echo x > '$I/github.com/8080'"
expect_errno "a name there that is not a port is EINVAL" "Invalid argument" sh -c "echo x > '$I/github.com/file'"
expect_errno "mkdir internet in the root is EEXIST" "File exists" mkdir "$MP/internet"

echo "== variants"
kc add-internet-password -s github.com -P 443 -r http -a alice -w plain-http >/dev/null
kc add-internet-password -s github.com -P 443 -t html-form -a alice -w form >/dev/null
kc add-internet-password -s github.com -P 443 -d example.org -a alice -w domain >/dev/null
expect_eq "alice alice%~http alice%~https,default,example.org alice%~https,html-form" \
    "$(ls "$I/github.com/443" | grep alice | tr '\n' ' ' | sed 's/ $//')" "variants are listed under tagged names"
expect_eq "gh-secret" "$(cat "$I/github.com/443/alice")" "the plain name is the canonical variant"
expect_eq "plain-http" "$(cat "$I/github.com/443/alice%~http")" "a protocol variant is reachable"
expect_eq "form" "$(cat "$I/github.com/443/alice%~https,html-form")" "an auth-type variant is reachable"
expect_eq "domain" "$(cat "$I/github.com/443/alice%~https,default,example.org")" "a security-domain variant is reachable"
sh -c "printf changed > '$I/github.com/443/alice'"
expect_eq "plain-http" "$(kc find-internet-password -s github.com -r http -a alice -w)" "a write to the plain name overwrites no other variant"
expect_eq "form" "$(kc find-internet-password -s github.com -t html-form -a alice -w)" "nor the auth-type variant"
sh -c "printf new-ssh > '$I/github.com/443/alice%~ssh'"
expect_contains "$(kc find-internet-password -s github.com -P 443 -r ssh -a alice)" "ssh" "writing a tagged name creates that variant"

echo "== attributes"
expect_eq "https" "$(getfattr --only-values -n user.keychain.protocol "$I/github.com/443/alice")" "protocol reads as a friendly name"
expect_eq "default" "$(getfattr --only-values -n user.keychain.authtype "$I/github.com/443/alice")" "authtype reads as a friendly name"
expect_eq "" "$(getfattr --only-values -n user.keychain.securitydomain "$I/github.com/443/alice" 2>/dev/null)" "the security domain is empty"
expect_exit 0 "setting the protocol" setfattr -n user.keychain.protocol -v ftp "$I/git.example.org/22/deploy"
expect_eq "ssh-secret" "$(cat "$I/git.example.org/22/deploy%~ftp")" "keeps the item reachable under its new name"
expect_errno "a protocol change onto an existing variant is EEXIST" "File exists" setfattr -n user.keychain.protocol -v http "$I/github.com/443/alice"
expect_exit 0 "setting a security domain" setfattr -n user.keychain.securitydomain -v corp "$I/github.com/443/org/repo.git/bob"
expect_eq "deep" "$(cat "$I/github.com/443/org/repo.git/bob%~https,default,corp")" "the item moves to its tagged name"
expect_errno "an unknown protocol is EINVAL" "Invalid argument" setfattr -n user.keychain.protocol -v gopherish "$I/github.com/443/alice"

echo "== rename, edit, delete"
expect_exit 0 "mv renames an account" mv "$I/github.com/443/x/y/carol" "$I/github.com/443/x/y/caroline"
expect_exit 0 "mv moves to another path" mv "$I/github.com/443/x/y/caroline" "$I/github.com/443/org/caroline"
expect_eq "normal" "$(kc find-internet-password -s github.com -p org -a caroline -w)" "the moved item keeps its secret"
expect_exit 0 "sed -i edits an internet password" sed -i 's/normal/edited/' "$I/github.com/443/org/caroline"
expect_eq "edited" "$(cat "$I/github.com/443/org/caroline")" "sed -i saved it"
expect_errno "mv of an item into the root is EPERM" "Operation not permitted" mv "$I/example.com/8443/alice" "$MP/fromweb"
mkdir -p "$MP/svc"
expect_exit 0 "mv to a generic service (EXDEV, so mv copies)" mv "$I/mail.example.org/993/me" "$MP/svc/me"
expect_eq "mail-secret" "$(kc find-generic-password -s svc -a me -w)" "the item became a generic password"
expect_exit 44 "and the internet password is gone" kc find-internet-password -s mail.example.org -a me
expect_exit 0 "rm an internet password" rm "$I/github.com/443/alice%~https,html-form"
expect_exit 44 "it is gone from the store" kc find-internet-password -s github.com -t html-form -a alice
expect_exit 0 "rm -r a whole server" rm -r "$I/github.com"
expect_exit 44 "every item below it is gone" kc find-internet-password -s github.com
expect_exit 0 "the server directory is gone too" sh -c "! ls '$I' | grep -qx github.com"

echo "== path directories and items of the same name"
mkdir -p "$I/docs.example/443"
sh -c "printf file > '$I/docs.example/443/guide'"
expect_errno "mkdir over an item's name is EEXIST" "File exists" mkdir "$I/docs.example/443/guide"
kc add-internet-password -s docs.example -p guide -a reader -w inner >/dev/null
expect_eq "guide guide%~https" "$(list "$I/docs.example/443")" "a directory keeps the plain name; the item is listed tagged"
expect_eq "file" "$(cat "$I/docs.example/443/guide%~https")" "and stays reachable"

echo "== locking"
kc add-internet-password -s locked.example -a u -w wu >/dev/null
kc add-internet-password -s locked.example -a v -w afu --accessible after-first-unlock >/dev/null
kc lock "$MP"
expect_errno "a when-unlocked internet password fails with ENOKEY" "Required key not available" cat "$I/locked.example/443/u"
expect_eq "afu" "$(cat "$I/locked.example/443/v")" "an after-first-unlock one reads while locked"
expect_eq "u v" "$(list "$I/locked.example/443")" "names stay listed"
kc unlock "$MP" --passphrase-file "$PASSFILE"

echo "== names are stable across remounts"
sleep 1.2  # the kernel's 1 s attribute cache still types docs.example/443/guide as the file it was
before=$(find "$I" -type f | sort)
kc unmount "$MP" >/dev/null
mount_kc "$MP"
expect_eq "$before" "$(find "$I" -type f | sort)" "the same file names after a remount"

finish
