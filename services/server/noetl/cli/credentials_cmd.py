"""`noetl credentials`: set, show, list and delete stored credentials, each change recorded in the
audit trail under the connection's NATS identity."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from noetl.cli.ops_cmd import _print_json


def _credential_data(args: argparse.Namespace) -> dict[str, Any]:
    """The value comes from an argument or a file; errors never echo it back."""
    import yaml

    if (args.data is None) == (args.data_file is None):
        raise ValueError("give exactly one of --data JSON or --data-file FILE")
    try:
        text = args.data if args.data is not None else Path(args.data_file).read_text()
        value = yaml.safe_load(text)  # JSON is YAML; a file may be either
    except OSError as e:
        raise ValueError(f"cannot read {args.data_file}: {e.strerror}") from None
    except yaml.YAMLError:
        raise ValueError("credential data is neither JSON nor YAML") from None
    if not isinstance(value, dict):
        raise ValueError("credential data must be a mapping of fields")
    return value


def _scope_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """``--inputs JSON`` / ``--no-inputs``: the scope's ``inputs``, so a reviewed playbook that
    sends the credential somewhere its caller names can be held to the places the admin allows."""
    import json

    given = getattr(args, "inputs", None)
    if getattr(args, "no_inputs", False):
        if given is not None:
            raise ValueError("give --inputs JSON or --no-inputs, not both")
        return {"inputs": {}}
    if given is None:
        return {}
    try:
        return {"inputs": json.loads(given)}
    except ValueError:
        raise ValueError(
            '--inputs is JSON: {"url": {"pattern": "https://api\\.example\\.com/.*"}, '
            '"region": {"values": ["eu", "us"]}}'
        ) from None


def nats_identity(nc: Any) -> str | None:
    """Who a NATS connection says it is (a user name, a token's hash prefix, a credentials file),
    or None for an anonymous one. Never the password or token itself."""
    from noetl.store.audit import token_id

    opts = getattr(nc, "options", None) or {}
    if opts.get("user"):
        return f"nats-user:{opts['user']}"
    if opts.get("token"):
        return "nats-" + token_id(str(opts["token"]))
    if getattr(nc, "_user_credentials", None) or opts.get("nkeys_seed") or getattr(nc, "_nkeys_seed", None):
        return "nats-credentials"
    server = getattr(nc, "_current_server", None)
    user = getattr(getattr(server, "uri", None), "username", None)
    return f"nats-user:{user}" if user else None


async def _credentials(nc: Any, args: argparse.Namespace) -> int:
    """``noetl credentials set|list|delete`` on the KV bucket itself. A write or delete names
    its NATS identity in the audit trail (``noetl.audit.credentials``) before it happens, and is
    refused from an anonymous connection unless ``--anonymous`` says that is meant (a private
    nats-server): with an anonymous default server, anyone on the network could otherwise
    replace or delete a credential and leave no trace."""
    from noetl.cli.as_principal import principal_token
    from noetl.dsl.errors import KeychainUnresolvedError
    from noetl.events.nats_port import NatsBus
    from noetl.store.audit import ensure_audit_stream, record_credential_access
    from noetl.store.credentials import CredentialStore

    if principal_token():  # as a principal: the service checks the role and audits its name
        return await _credentials_as_principal(nc, args)
    bus = NatsBus(nc)
    store = await CredentialStore.open(bus, None)
    who = nats_identity(nc)
    try:
        if args.action in ("set", "delete"):
            if who is None and not getattr(args, "anonymous", False):
                print(
                    f"noetl: refusing to {args.action} a credential over an anonymous NATS connection: "
                    "connect as a NATS user (NOETL_NATS_USER/PASSWORD, NOETL_NATS_CREDS, NOETL_NATS_TOKEN), "
                    "or pass --anonymous for a private nats-server",
                    file=sys.stderr,
                )
                return 2
            await ensure_audit_stream(bus)
        if args.action == "set":
            return await _set_here(bus, store, who, args)
        elif args.action == "list":
            _print_entries(await store.list())
        else:
            if not await store.exists(args.name):
                print(f"noetl: no credential {args.name!r}", file=sys.stderr)
                return 1
            await record_credential_access(
                bus, action="credential.delete", credential=args.name, who=who or "anonymous",
                outcome="deleted", remote="cli",
            )
            await store.delete(args.name)
            _print_json({"name": args.name, "deleted": True})
    except KeychainUnresolvedError as e:
        print(f"noetl: {e.message}", file=sys.stderr)
        return 2
    except ValueError as e:  # an invalid name or value (the message never holds the value)
        print(f"noetl: {e}", file=sys.stderr)
        return 2
    return 0


def _scope(args: argparse.Namespace, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The scope ``noetl credentials set`` asks for: ``--scope`` paths (every path by default),
    ``--allow-inline``, and ``--inputs``/``--no-inputs``."""
    return {"paths": args.scope or ["*"], "inline": args.allow_inline,
            **(_scope_inputs(args) if inputs is None else inputs)}


def _print_entries(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        print(f"{entry['name']}\t{entry.get('kind')}")


async def _set_here(bus: Any, store: Any, who: str | None, args: argparse.Namespace) -> int:
    """``noetl credentials set`` on the bucket itself: a weak secret refused, the write audited
    under the connection's NATS identity before it happens."""
    from noetl.events.masking import weak_refusal
    from noetl.store.audit import record_credential_access
    from noetl.store.credentials import check_scope

    data = _credential_data(args)
    refusal = weak_refusal(args.name, data, args.kind, " (or --allow-weak)")
    if refusal and not getattr(args, "allow_weak", False):
        print(f"noetl: {refusal}", file=sys.stderr)
        return 2
    scope = check_scope(_scope(args))  # refused before anything is recorded
    await record_credential_access(
        bus, action="credential.put", credential=args.name, who=who or "anonymous",
        outcome="stored", kind=args.kind, remote="cli",
    )
    await store.put(args.name, args.kind, data, scope)
    _print_json({"name": args.name, "kind": args.kind, "scope": scope, "stored": True})
    return 0


async def _credentials_as_principal(nc: Any, args: argparse.Namespace) -> int:
    """``noetl credentials`` with ``NOETL_TOKEN``: through ``noetl.api.credentials.*``, so a
    principal's NATS user needs no right on the keychain bucket, and a write names the principal."""
    from noetl.cli.as_principal import call_service, refusal_exit

    body: dict[str, Any] = {"name": getattr(args, "name", None)}
    if args.action == "set":
        try:
            body["data"] = _credential_data(args)
            inputs = _scope_inputs(args)
        except ValueError as e:
            print(f"noetl: {e}", file=sys.stderr)
            return 2
        allow_weak = bool(getattr(args, "allow_weak", False))
        body |= {"kind": args.kind, "scope": _scope(args, inputs), "allow_weak": allow_weak}
    out = await call_service(nc, f"noetl.api.credentials.{args.action}", body)
    if (code := refusal_exit(out)) is not None:
        return code
    if args.action == "list":
        _print_entries(out.get("credentials") or [])
    else:
        _print_json(out)
    return 0
