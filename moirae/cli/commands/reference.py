"""``moirae archive reference NAME --csv F | --sql Q``: load or reload a reference table
(:mod:`archive.reference`) straight into the archive's database; a running engine reads
the new version within a second. ``moirae archive references`` lists them."""

from __future__ import annotations

from moirae.cli.commands.registry import command, print_json


@command("archive reference")
def load_reference(args) -> int:
    from moirae import config
    from moirae.rules import reference
    from moirae.runtime.store import open_archiver

    archiver = open_archiver(config.load(args.config))
    try:
        key = None if args.key is None else [k.strip() for k in args.key.split(",") if k.strip()]
        result = reference.load(archiver, args.name, csv=args.csv, sql=args.sql, key=key,
                                valid_from=args.valid_from)
    finally:
        archiver.close()
    if args.json:
        print_json(result)
    elif result["inserted"] or result["changed"] or result["removed"]:
        print(f"reference table {result['name']}: version {result['version']}, {result['rows']} rows "
              f"({result['inserted']} new, {result['changed']} changed, {result['removed']} removed)")
    else:
        print(f"reference table {result['name']}: unchanged (version {result['version']}, {result['rows']} rows)")
    return 0


@command("archive references")
def list_references(args) -> int:
    from moirae import config
    from moirae.runtime.store import open_archiver

    archiver = open_archiver(config.load(args.config))
    try:
        tables = archiver.references.status()
    finally:
        archiver.close()
    if args.json:
        print_json(tables)
    elif not tables:
        print("no reference tables")
    else:
        for t in tables:
            cols = ", ".join(f"{c} {ty}" for c, ty in t["columns"].items())
            print(f"{t['name']}  version {t['version']}  key {', '.join(t['key'])}  ({cols})")
    return 0
