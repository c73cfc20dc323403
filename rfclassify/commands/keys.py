"""`rfclassify keys`: make a CURVE key pair for the daemon or one of its clients."""

from __future__ import annotations

import argparse

from rfclassify._argtypes import path_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=path_text, required=True, metavar="DIR",
                        help="directory to write the key files into")
    parser.add_argument("--name", default="rfclassify", metavar="NAME",
                        help="file name stem: NAME.key (public) and NAME.key_secret (default: rfclassify)")
    parser.add_argument("--force", action="store_true", help="replace existing key files")


def run(args: argparse.Namespace) -> int:
    from rfclassify.serve.security import create_key_pair, load_public_key

    public, secret = create_key_pair(args.dir, args.name, overwrite=args.force)
    print(f"public key  {public}  (give to peers; copy client keys into the daemon's authorized_keys_dir)")
    print(f"secret key  {secret}  (keep private, mode 0600)")
    print(f"z85 public  {load_public_key(public).decode('ascii')}")
    return 0
