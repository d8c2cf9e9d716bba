"""``dra-extender explain NS/POD``: a running extender's ``/debug/explain`` answer, for people.

The answer says, per node, whether the pod's claims fit, why not, and which pods would have to
go. Reached over the extender's own port: with ``kubectl port-forward`` to the extender (or
``kubectl exec`` into its pod), and with client certificates when the port requires them. Through a
port-forward the address is 127.0.0.1 while the serving certificate may name only the Service:
``--server-name`` checks the certificate against that name instead (and sends it as SNI).
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

# More nodes than this are summarised: the full answer is one --json away.
NODES_SHOWN = 20


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    explain = sub.add_parser(
        "explain", help="ask a running extender why a pod fits where, or not",
        description="Ask a running extender (its /debug/explain endpoint, on with "
        "--enable-debug-endpoints) why a pod fits on which nodes, or why not.",
        formatter_class=formatter,
    )
    explain.add_argument("pod", metavar="NAMESPACE/NAME")
    explain.add_argument("--url", default="http://127.0.0.1:8888", help="the extender's address")
    explain.add_argument("--json", action="store_true", help="print the answer as the endpoint gives it")
    explain.add_argument("--ca-file", "--cacert", dest="ca_file", metavar="FILE",
                         help="CA bundle (PEM) to verify an https:// extender with (default: the system's)")
    explain.add_argument("--cert-file", "--cert", dest="cert_file", metavar="FILE",
                         help="client certificate (PEM), when the extender asks for one (--client-ca-file)")
    explain.add_argument("--key-file", "--key", dest="key_file", metavar="FILE",
                         help="the client certificate's private key (PEM), if not in --cert-file")
    explain.add_argument("--server-name", metavar="NAME",
                         help="the name the extender's certificate must carry, when it is not the URL's "
                         "host (e.g. dra-extender through kubectl port-forward to 127.0.0.1)")
    explain.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer")


def run(args: argparse.Namespace) -> int:
    if args.pod.count("/") != 1 or not all(args.pod.split("/")):
        print(f"dra-extender explain: {args.pod!r}: expected NAMESPACE/NAME", file=sys.stderr)
        return 2
    url = f"{args.url.rstrip('/')}/debug/explain?{urllib.parse.urlencode({'pod': args.pod})}"
    tls_flags = [flag for flag, value in (("--ca-file", args.ca_file), ("--cert-file", args.cert_file),
                 ("--key-file", args.key_file), ("--server-name", args.server_name)) if value]
    if tls_flags and not url.startswith("https:"):
        print(f"dra-extender explain: {', '.join(tls_flags)} need an https:// --url", file=sys.stderr)
        return 2
    if args.key_file and not args.cert_file:
        print("dra-extender explain: --key-file needs --cert-file", file=sys.stderr)
        return 2
    try:
        opener = _opener(args) if url.startswith("https:") else urllib.request.build_opener()
        with opener.open(url, timeout=args.timeout) as reply:
            answer = json.load(reply)
    except urllib.error.HTTPError as exc:
        text = _error_text(exc)
        print(f"dra-extender explain: {url}: HTTP {exc.code}: {text}", file=sys.stderr)
        if exc.code == 404 and "not known" not in text:
            print("(is the extender serving /debug/*? --enable-debug-endpoints)", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"dra-extender explain: {url}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2) if args.json else render(answer))
    return 0


def _opener(args: argparse.Namespace) -> urllib.request.OpenerDirector:
    context = ssl.create_default_context(cafile=args.ca_file)
    if args.cert_file:
        context.load_cert_chain(args.cert_file, args.key_file)
    return urllib.request.build_opener(_HTTPSHandler(context, args.server_name))


class _HTTPSHandler(urllib.request.HTTPSHandler):
    """HTTPS whose certificate is checked against ``server_name`` (also sent as SNI) when given."""

    def __init__(self, context: ssl.SSLContext, server_name: str | None) -> None:
        super().__init__(context=context)
        self._server_name = server_name

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(_NamedHTTPSConnection, server_name=self._server_name)
        return self.do_open(connection, req, context=self._context)  # type: ignore[attr-defined]


class _NamedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args: Any, server_name: str | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._server_name = server_name

    def connect(self) -> None:
        if self._server_name is None:
            super().connect()
            return
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(  # type: ignore[attr-defined]
            self.sock, server_hostname=self._server_name
        )


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read())
    except ValueError:
        return exc.reason
    return str(body.get("error") or body.get("detail") or body) if isinstance(body, dict) else str(body)


def render(answer: dict[str, Any]) -> str:
    """The answer as a few lines: the verdict, the claims, then the nodes, fitting ones first."""
    lines = [f"pod {answer.get('pod')}: {answer.get('verdict')}"]
    if answer.get("nodeName"):
        lines.append(f"bound to node {answer['nodeName']}")
    for claim in answer.get("claims") or ():
        state = "allocated" if claim.get("allocated") else "not allocated"
        held = claim.get("devices") or ()
        devices = ", ".join(f"{d.get('driver')}/{d.get('pool')}/{d.get('device')}" for d in held)
        lines.append(f"  claim {claim['claim']}: {state}{': ' + devices if devices else ''}")
    nodes: dict[str, Any] = answer.get("nodes") or {}
    ordered = sorted(nodes.items(), key=lambda item: (not item[1].get("fits"), item[0]))
    for name, node in ordered[:NODES_SHOWN]:
        lines.append(f"  {name}: {_node_line(node)}")
    if len(ordered) > NODES_SHOWN:
        lines.append(f"  ... and {len(ordered) - NODES_SHOWN} more nodes (--json shows all)")
    return "\n".join(lines)


def _node_line(node: dict[str, Any]) -> str:
    if node.get("fits"):
        allocation = node.get("allocation") or {}
        picks = "; ".join(
            f"{claim}: {', '.join(d for devices in requests.values() for d in devices)}"
            for claim, requests in allocation.items()
        )
        return f"fits{' (' + picks + ')' if picks else ''}"
    text = f"does not fit: {node.get('reason')}"
    preemption = node.get("preemption")
    if isinstance(preemption, dict) and preemption.get("evict"):
        text += f"; would fit after evicting {', '.join(preemption['evict'])}"
    elif isinstance(preemption, str):
        text += f"; {preemption}"
    return text
