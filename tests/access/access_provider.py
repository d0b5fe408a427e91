"""A real OAuth 2.0 provider for the access tests, built with authlib's server classes.

``OAuthProvider`` serves RFC 7009 token revocation (``/revoke``) and RFC 7662 token
introspection (``/introspect``) with :class:`authlib.integrations.flask_oauth2.AuthorizationServer`,
:class:`authlib.oauth2.rfc7009.RevocationEndpoint` and
:class:`authlib.oauth2.rfc7662.IntrospectionEndpoint`, over an in-memory token store, on
127.0.0.1 (a free port) in a thread. Clients authenticate with ``client_secret_basic``.

Modes:
    ``up``          answers normally;
    ``unavailable`` answers every request with 503 (and a Retry-After);
    ``down``        :meth:`stop` closes the port; :meth:`start` reopens the same port;
    ``jwt_access``  access tokens are "self-contained": the revocation endpoint refuses them
                    (``unsupported_token_type``, as RFC 7009 §2.2.1 allows) and introspection
                    keeps reporting them active until they expire.

Each token is a separate record: revoking the refresh token does not revoke the access
token (RFC 7009 leaves that to the server), so a test can see that both were sent.

Refresh token rotation (RFC 6749 §6, RFC 9700 §4.14): a refresh (:meth:`OAuthProvider.refresh`,
or ``POST /token`` with ``grant_type=refresh_token`` as an agent's OAuth client sends it) issues a
new access and refresh token and invalidates the old refresh token (the old access token lives
on until it expires). Presenting an invalidated refresh token again answers ``invalid_grant``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from authlib.common.security import generate_token
from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, TokenMixin
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7662 import IntrospectionEndpoint
from flask import Flask, Response, request
from werkzeug.serving import make_server

logging.getLogger("werkzeug").setLevel(logging.ERROR)


@dataclass
class Client(ClientMixin):
    client_id: str
    client_secret: str

    def get_client_id(self) -> str:
        return self.client_id

    def check_client_secret(self, client_secret: str) -> bool:
        return client_secret == self.client_secret

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "client_secret_basic"

    def get_allowed_scope(self, scope):  # noqa: ANN001 - authlib's signature
        return scope


@dataclass
class Token(TokenMixin):
    value: str
    kind: str  # access_token / refresh_token
    client_id: str
    scope: str
    issued_at: int
    expires_in: int
    revoked: bool = False

    def check_client(self, client: Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return self.expires_in

    def is_expired(self) -> bool:
        return time.time() >= self.issued_at + self.expires_in

    def is_revoked(self) -> bool:
        return self.revoked


@dataclass
class Tokens:
    by_value: dict[str, Token] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def find(self, value: str, hint: str | None) -> Token | None:
        # The hint only speeds the lookup up; a wrong hint still finds the token (RFC 7009 §2.1).
        with self.lock:
            return self.by_value.get(value)


class OAuthProvider:
    """The provider. ``requests`` counts each request by path."""

    def __init__(self, client_id: str = "sealbox-test", client_secret: str | None = None) -> None:
        self.client = Client(client_id, client_secret or generate_token(32))
        self.tokens = Tokens()
        self.mode = "up"
        self.jwt_access = False
        self.requests: list[tuple[str, str | None]] = []  # (path, token_type_hint)
        self.port: int | None = None
        self._server = None
        self._thread: threading.Thread | None = None
        self.app = self._build_app()

    # ------------------------------------------------------------------ tokens

    def issue(self, scope: str = "repo:read", access_expires_in: int = 3600) -> dict[str, str]:
        """Mint an access and a refresh token for the client; return them."""
        now = int(time.time())
        access = Token(generate_token(40), "access_token", self.client.client_id, scope, now, access_expires_in)
        refresh = Token(generate_token(48), "refresh_token", self.client.client_id, scope, now, 30 * 86400)
        with self.tokens.lock:
            self.tokens.by_value[access.value] = access
            self.tokens.by_value[refresh.value] = refresh
        return {"access_token": access.value, "refresh_token": refresh.value}

    def refresh(self, refresh_token: str) -> dict[str, str]:
        """Refresh with rotation: a new access and refresh token; the old refresh token is invalidated.

        Raises:
            ValueError: ``invalid_grant``: the refresh token is unknown, expired, revoked or rotated away.
        """
        with self.tokens.lock:
            old = self.tokens.by_value.get(refresh_token)
            if old is None or old.kind != "refresh_token" or old.revoked or old.is_expired():
                raise ValueError("invalid_grant")
            old.revoked = True  # rotated away: this token can never be used again
        return self.issue(old.scope)

    def is_active(self, value: str) -> bool:
        tok = self.tokens.by_value[value]
        return not tok.is_revoked() and not tok.is_expired()

    # ------------------------------------------------------------------ the server

    def _build_app(self) -> Flask:
        app = Flask("sealbox-test-provider")
        provider = self
        server = AuthorizationServer(app, query_client=lambda cid: provider.client if cid == provider.client.client_id else None,
                                     save_token=lambda token, req: None)

        class Revocation(RevocationEndpoint):
            @property
            def SUPPORTED_TOKEN_TYPES(self):  # noqa: N802 - authlib's attribute
                return ("refresh_token",) if provider.jwt_access else ("access_token", "refresh_token")

            def query_token(self, token_string, token_type_hint):  # noqa: ANN001
                return provider.tokens.find(token_string, token_type_hint)

            def revoke_token(self, token, request):  # noqa: ANN001
                if provider.jwt_access and token.kind == "access_token":
                    return  # a self-contained token cannot be revoked
                with provider.tokens.lock:
                    token.revoked = True

        class Introspection(IntrospectionEndpoint):
            def query_token(self, token_string, token_type_hint):  # noqa: ANN001
                return provider.tokens.find(token_string, token_type_hint)

            def check_permission(self, token, client, request):  # noqa: ANN001
                return token.client_id == client.client_id

            def introspect_token(self, token):  # noqa: ANN001
                return {"active": True, "client_id": token.client_id, "token_type": "Bearer"
                        if token.kind == "access_token" else "refresh_token", "scope": token.scope,
                        "exp": token.issued_at + token.expires_in, "iat": token.issued_at}

        server.register_endpoint(Revocation)
        server.register_endpoint(Introspection)

        @app.before_request
        def count_and_maybe_fail():
            self.requests.append((request.path, request.form.get("token_type_hint")))
            if self.mode == "unavailable":
                return Response('{"error": "temporarily_unavailable"}', status=503,
                                headers={"Retry-After": "1", "Content-Type": "application/json"})
            return None

        @app.post("/revoke")
        def revoke():
            return server.create_endpoint_response("revocation")

        @app.post("/introspect")
        def introspect():
            return server.create_endpoint_response("introspection")

        @app.post("/token")
        def token():
            # only what an OAuth client's refresh needs (RFC 6749 §6), with client_secret_basic
            auth = request.authorization
            if auth is None or auth.username != provider.client.client_id \
                    or not provider.client.check_client_secret(auth.password or ""):
                return Response('{"error": "invalid_client"}', status=401, content_type="application/json")
            if request.form.get("grant_type") != "refresh_token":
                return Response('{"error": "unsupported_grant_type"}', status=400, content_type="application/json")
            try:
                tokens = provider.refresh(request.form.get("refresh_token") or "")
            except ValueError:
                return Response('{"error": "invalid_grant"}', status=400, content_type="application/json")
            import json as _json

            return Response(_json.dumps({**tokens, "token_type": "Bearer", "expires_in": 3600}),
                            content_type="application/json")

        return app

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def credential(self, tokens: dict[str, str], *, introspection: bool = True) -> dict[str, str]:
        """The credential dict Sealbox stores for a grant using these tokens."""
        cred = {"revocation_endpoint": f"{self.base}/revoke", "client_id": self.client.client_id,
                "client_secret": self.client.client_secret, **tokens}
        if introspection:
            cred["introspection_endpoint"] = f"{self.base}/introspect"
        return cred

    def start(self) -> "OAuthProvider":
        """Serve on 127.0.0.1 (the same port as before after a :meth:`stop`)."""
        self._server = make_server("127.0.0.1", self.port or 0, self.app, threaded=True)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self.mode = "up" if self.mode == "down" else self.mode
        return self

    def stop(self) -> None:
        """Close the port (mode ``down``): connections are refused."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5)
            self._server = None
        self.mode = "down"


class ScriptedServer:
    """A plain HTTP server on 127.0.0.1 (a free port, in a thread) for provider misbehaviour
    that authlib's endpoints never show: redirects, echoed tokens, odd bodies.

    ``answer(method, path, form)`` returns ``(status, headers, body)`` (``body`` a dict is sent
    as JSON). Every request is recorded in ``requests`` as ``(method, path, form)``.
    """

    def __init__(self, answer) -> None:  # noqa: ANN001
        import http.server
        import json
        import urllib.parse

        server = self
        self.answer = answer
        self.requests: list[tuple[str, str, dict[str, str]]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # noqa: ANN002
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in urllib.parse.parse_qs(self.rfile.read(length).decode()).items()}
                server.requests.append((method, self.path, form))
                status, headers, body = server.answer(method, self.path, form)
                data = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
                self.send_response(status)
                for k, v in {**({"Content-Type": "application/json"} if isinstance(body, dict) else {}),
                             **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802
                self._serve("POST")

            def do_GET(self):  # noqa: N802
                self._serve("GET")

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
