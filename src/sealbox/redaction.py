"""Redaction and content modes, applied before anything is hashed.

A store has a **content mode**:

- ``full``: content is kept as given.
- ``redacted`` (the default): values under sensitive key names, at configured
  paths, and substrings matching configured patterns are replaced by a marker
  ``{"$redacted": "hmac-sha256:<hex>"}`` (inside a string:
  ``⟦redacted:hmac-sha256:<hex>⟧``), everything else is kept.
- ``hashes-only``: every content field (arguments, results, messages, state,
  decision inputs) is replaced by its marker; only the commitments remain.

The marker is HMAC-SHA256 under the store's secret (never exported) of the
value's canonical bytes: equal secrets compare equal inside the store, and a
holder of an export cannot brute-force them without the secret.

What each mode gives up: ``redacted`` — replay and what-if of steps whose
arguments or results held redacted values (they are reported as not
replayable / not re-evaluable, never re-run on a marker); ``hashes-only`` —
replay, what-if and offline re-evaluation of decisions altogether; the record
still proves what happened, when, in which order and under which decision.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import hmac
import json
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from sealbox.canonical import canonical_bytes, canonical_bytes_encoded, encode
from sealbox.errors import CanonicalizationError, ConfigError

try:  # the optional C extension; SEALBOX_PURE_PYTHON=1 uses the regex searches alone
    from sealbox._speedups import scan_text as _c_scan_text
except ImportError:  # built without a C compiler, or an older build
    _c_scan_text = None
if os.environ.get("SEALBOX_PURE_PYTHON") == "1":
    _c_scan_text = None

__all__ = ["CONTENT_MODES", "DEFAULT_KEYS", "DEFAULT_PATTERNS", "ContentPolicy", "Redactor", "MARKER_TAG",
           "holds_marker"]

CONTENT_MODES = ("full", "redacted", "hashes-only")
MARKER_TAG = "$redacted"

#: Key names whose values are redacted: compared in lower case without ``-`` and ``_`` (so ``accessToken``,
#: ``Access-Token`` and ``access_token`` match ``access_token``). Not ``max_tokens`` or ``input_tokens``.
DEFAULT_KEYS = (
    "password", "passwd", "passphrase", "secret", "client_secret", "api_key", "apikey", "x-api-key",
    "access_token", "refresh_token", "id_token", "token", "authorization", "proxy-authorization",
    "cookie", "set-cookie", "private_key", "session_token", "auth_token", "x-auth-token", "secret_key",
    "secret_access_key", "aws_secret_access_key", "x-amz-security-token", "client_assertion",
    # well-known environment variable names (a dict of settings, a container's env as name/value members), matched
    # as the others are (exact once normalised: DB_PASSWORD, db-password, dbPassword); free text has a suffix pattern
    "db_password", "database_password", "pgpassword", "postgres_password", "mysql_pwd", "mysql_password",
    "mysql_root_password", "mariadb_password", "mariadb_root_password", "mongo_initdb_root_password", "redis_password",
    "rabbitmq_default_pass", "github_token", "gh_token", "gitlab_token", "npm_token", "node_auth_token", "slack_token",
    "slack_bot_token", "hf_token", "huggingface_hub_token", "openai_api_key", "anthropic_api_key", "google_api_key",
    "gemini_api_key", "mistral_api_key", "stripe_secret_key", "stripe_api_key", "sendgrid_api_key", "jwt_secret",
    "secret_key_base",
    # a name starting with "*" is a suffix: any name whose normalised form ends with the rest (MY_APP_PASSWORD,
    # my_app_secret, webhookSecret, STRIPE_LIVE_API_KEY); a credential's token only after its word (not *token:
    # max_tokens ends with "tokens", but page_token, next_token, eos_token would match)
    "*password", "*passwd", "*passphrase", "*secret", "*secret_key", "*api_key", "*private_key", "*access_token",
    "*refresh_token", "*auth_token", "*session_token", "*api_token", "*bot_token", "*security_token",
)

#: The PEM / OpenPGP private key pattern; :data:`_LINEAR_EQUIVALENTS` names the one it replaced.
_PEM_PATTERN = (r"-{5}BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----(?:[^-]|-{1,4}[^-])*?"
                r"-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----")

#: Default patterns since replaced by one matching the same secrets in linear time, as a store created before keeps
#: them pinned: such a store searches with the replacement (its pinned settings, and their fingerprint, unchanged).
_LINEAR_EQUIVALENTS = {
    # the PEM pattern's lazy [\s\S]*? scanned from each unclosed BEGIN to the text's end
    r"-{5}BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----": _PEM_PATTERN,
}

#: Patterns of secrets inside strings (Python ``re``).
DEFAULT_PATTERNS = (
    r"(?i)\bbearer\s+[a-z0-9._~+/=-]{8,}",
    r"\bsk-[A-Za-z0-9_-]{16,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",
    r"\bgithub_pat_[A-Za-z0-9_]{22,}",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
    r"://[^\s:/@]*:[^\s@/]+@",  # user:password@ in a URL (also :password@, no user name: redis://:pw@host)
    # PEM, OpenPGP (... KEY BLOCK-----); -{5}: the required literal stays "PRIVATE KEY", not "-----BEGIN ". The body
    # holds no run of five dashes (a key's base64 and headers never do; written without a lookahead, which would disable
    # the quick check): its scan stops at the next "-----", END or another BEGIN (from which a match finds what this one
    # would), so that a text repeating unclosed BEGIN lines is not scanned to its end from each (quadratic: 40 KB 0.35 s)
    _PEM_PATTERN,
    # key=value / key: value of a secret name in free text (password=..., ?api_key=...&, 'token': '...'),
    # the name in lower, Capitalised or UPPER case (camelCase apiKey, accessToken too): only the value (up to
    # whitespace, &, ;, a comma or a quote) is redacted; not max_tokens=, tokens=. Case-sensitive, in two
    # patterns: each then has required literals the quick check gates its search on (see _required_literals)
    r"\b(?:[Pp]ass(?:word|wd)|PASS(?:WORD|WD)|[Pp]wd|PWD|(?:[Cc]lient_?|CLIENT_|[Aa]ws_?|AWS_)?(?:[Ss]ecret|SECRET)(?:_?(?:[Aa]ccess_?)?[Kk]ey|_(?:ACCESS_)?KEY)?)"
    r"[\x22\x27]?\s*[:=]\s*[\x22\x27]?(?P<redact>[^\s&;,\x22\x27\u27e6]+)",
    r"\b(?:[Aa]pi[-_]?[Kk]ey|API[-_]?KEY|(?:(?:[Aa](?:ccess|uth|ws_?[Ss]ession)|A(?:CCESS|UTH|WS_SESSION)|[Rr]efresh|REFRESH|[Ss]ession|SESSION)_?)?(?:[Tt]oken|TOKEN))"
    r"[\x22\x27]?\s*[:=]\s*[\x22\x27]?(?P<redact_token>[^\s&;,\x22\x27\u27e6]+)",
    # passphrase / private_key (its own pattern: few required literals); no leading \b, which would make re try
    # every position of a text holding one of the words (~2x slower), and GPG_PASSPHRASE=, SSH_PRIVATE_KEY= hold one
    r"[Pp](?:assphrase|ASSPHRASE|rivate_?[Kk]ey|RIVATE_?KEY)"
    r"[\x22\x27]?\s*[:=]\s*[\x22\x27]?(?P<redact_key>[^\s&;,\x22\x27\u27e6]+)",
    # the credentials of an Authorization / Proxy-Authorization header (line, repr, JSON-ish text): after a known
    # scheme (kept readable) its token or its comma-separated auth-params (Digest: username="…", response="…"),
    # up to a quote, a line end or a word not joined by a comma; the first one holding '=' (a parameter, base64
    # padding), a digit or one of +/._~- or of at least 8 characters (not a word of prose: "Authorization: Negotiate
    # is not supported"); with no scheme, a bare token holding a digit (an API key; not "Authorization: required")
    r"(?i)\bauthorization[\x22\x27]?[\t ]*[:=][\t ]*[\x22\x27]?(?:(?:basic|bearer|digest|token|negotiate|ntlm|hoba|mutual"
    r"|oauth|dpop|hawk|mac|jwt|api-?key|key|sso-key|ssws|sharedkey|signature|aws4-hmac-sha256)[\t ]+"
    r"(?P<redact_auth>(?:[^\s,=\x22\x27\u27e6]+=+(?:\x22[^\x22\r\n\u27e6]*\x22|[^\s,\x22\x27\u27e6]*)"
    r"|[^\s,=\x22\x27\u27e6]*[0-9+/._~-][^\s,=\x22\x27\u27e6]*|[^\s,=\x22\x27\u27e6]{8,})"
    r"(?:[\t ]*,[\t ]*[^\s,=\x22\x27\u27e6]+(?:=+(?:\x22[^\x22\r\n\u27e6]*\x22|[^\s,\x22\x27\u27e6]*))?)*)"
    r"|(?P<redact_auth_bare>[A-Za-z0-9._~+/=-]*[0-9][A-Za-z0-9._~+/=-]*))",
    r"(?i)\bcookie[\x22\x27]?[\t ]*:[\t ]*(?P<redact_cookie>[^\s\u27e6][^\r\n\u27e6]*)",  # a Cookie:/Set-Cookie: line's value
    # a password on a command line: curl -u / --user / --proxy-user user:PASSWORD (also -uuser:pw, quoted), mysql /
    # mysqldump / mariadb [options] -pPASSWORD (not -p alone, which prompts; not --port), and --password PASSWORD (a space,
    # not =, which the key=value pattern has; not --password-stdin); the user name and the rest of the line stay
    # (three patterns, each starting with its literal: joined, re tries every position of a text holding one, ~3x slower).
    # Each scan from a literal stops where another match could start, or is bounded, so that a text repeating the
    # literal is not scanned to the line's end from each (quadratic: 256 KiB of 'curl ' or 'mysql -a ' took minutes):
    # curl's scan stops at the next 'curl' (a match from there finds what this one would; written without a lookahead,
    # which would disable the quick check: the text up to the line's end holding no 'curl'); mysql's name suffix is at
    # most 32 characters and -p is looked for among its first 32 options
    r"curl(?:[^c\r\n|;&]*?c(?:c|ur?c)*(?:[^cu\r\n|;&]|u[^cr\r\n|;&]|ur[^cl\r\n|;&]))*?[^c\r\n|;&]*?(?:c(?:c|ur?c)*(?:ur?)?)?"
    r"[\t ](?:-[uU][\t ]*|--(?:proxy-)?user[\t =]+)[\x22\x27]?[^\s:\x22\x27]*:"
    r"[\x22\x27]?(?P<redact_curl>[^\s\x22\x27\u27e6-][^\s\x22\x27\u27e6]*)",
    r"m(?:ysql|ariadb)[\w-]{0,32}(?:[\t ]+-[^\s|;&]*(?:[\t ]+[^\s|;&-][^\s|;&]*)?){0,32}?[\t ]+-p[\x22\x27]?(?P<redact_mysql>[^\s\x22\x27\u27e6-][^\s\x22\x27\u27e6]*)",
    r"--password[\t ]+[\x22\x27]?(?P<redact_password_arg>[^\s\x22\x27\u27e6-][^\s\x22\x27\u27e6]*)",
    # more passwords on command lines: sshpass -p PASSWORD (after -v / -P prompt), a registry login's -p PASSWORD (docker,
    # podman, nerdctl, buildah, skopeo, oras, helm registry login; after at most 16 words: -u user, the registry),
    # redis-cli's -a PASSWORD / --pass PASSWORD (after at most 16 words: -h host, -p port); each starts with its
    # literal (sshpass, login, redis-cli: the required literals gating it) and its scan is bounded (linear in a text
    # repeating it). Not ssh -p 22, redis-cli -p 6379, docker run -p 8080:80
    r"sshpass[\t ]+(?:-[vV][\t ]+|-P[\t ]*[^\s-]\S*[\t ]+){0,4}-p[\t ]*[\x22\x27]?(?P<redact_sshpass>[^\s\x22\x27\u27e6-][^\s\x22\x27\u27e6]*)",
    r"(?:docker|podman|nerdctl|buildah|skopeo|oras|registry)[\t ]+login(?:[\t ]+[^\s|;&]+){0,16}?[\t ]+-p(?:[\t ]+|=)"
    r"[\x22\x27]?(?P<redact_login>[^\s\x22\x27\u27e6-][^\s\x22\x27\u27e6]*)",
    r"redis-cli(?:[\t ]+[^\s|;&]+){0,16}?[\t ]+(?:-a|--pass)(?:[\t ]+|=)[\x22\x27]?(?P<redact_redis>[^\s\x22\x27\u27e6-][^\s\x22\x27\u27e6]*)",
    # a .netrc / _netrc entry (cat ~/.netrc, a CI log): machine HOST login USER password PASSWORD (or default login …
    # password …), on one line or several: the password; the host and user stay. Its required literal is 'password'
    r"(?:machine\s+[^\s\x22\x27]+|default)\s+login\s+[^\s\x22\x27]+\s+password\s+"
    r"[\x22\x27]?(?P<redact_netrc>[^\s\x22\x27\u27e6]+)",
    # the text of an XML element named as a secret (<password>…</password>, <ns:apiKey a="…"><![CDATA[…]]></ns:apiKey>):
    # the tags stay; up to the next tag (an empty element, <password/>, is no match); a CDATA section's scan for its
    # ]]> stops at the next '<!' (from each of many unclosed ones, it went to the text's end: quadratic)
    # A bare <token> element (a tokenizer's output, <token>USD</token>) only when its text holds a digit, '=', one of
    # +/._~- or is at least 8 characters long (a credential; a CDATA section whole)
    r"<(?:[\w.-]+:)?(?:(?i:pass(?:word|wd|phrase)|pwd|(?:client[-_]?|aws[-_]?)?secret(?:[-_]?(?:access[-_]?)?key)?|api[-_]?key"
    r"|(?:access|refresh|auth|id|session)[-_]?token|private[-_]?key|authorization|cookie)(?:\s[^<>]*)?>"
    r"(?P<redact_xml>(?:<!\[CDATA\[(?:[^<]|<+[^!<])*?\]\]>|[^<\u27e6])+)"
    r"|(?i:token)(?:\s[^<>]*)?>(?P<redact_xml_token><!\[CDATA\[(?:[^<]|<+[^!<])*?\]\]>"
    r"|[^<\u27e6]*[0-9+/=._~-][^<\u27e6]*|[^<\u27e6]{8,}))</",
    # an environment-style assignment (printenv, a .env file, docker inspect's Env, a compose file: NAME=value, NAME: value,
    # 'NAME': 'value', export NAME="value") of a name ending with an UPPER_CASE secret suffix (DB_PASSWORD, PGPASSWORD,
    # MYSQL_PWD, JWT_SECRET, STRIPE_SECRET_KEY, GITHUB_TOKEN, OPENAI_API_KEY, SSH_PRIVATE_KEY, MINIO_ACCESS_KEY; PASSWORD
    # and SECRET alone too, as the key=value pattern has them): its value, a quoted one whole; not TOKENIZERS_PARALLELISM,
    # MAX_TOKENS, PROMPT_TOKEN_COUNT, KEY_PASSWORD_FILE, OLDPWD (the suffix must end the name). Case-sensitive, starting
    # with the suffix (no [A-Z0-9] before it: re would try every capital letter of a text holding one of the words,
    # ~11 us on 780 bytes); its required literals (PASS, SECRET, _PWD, _TOKEN, _API, _PRIVATE, _ACCESS) gate its search
    r"(?:PASS(?:WORD|WD)|SECRET(?:_?KEY)?|_PWD|_TOKEN|_API_?KEY|_PRIVATE_?KEY|_ACCESS_?KEY)"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_env_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_env_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_env>[^\s\x22\x27\u27e6]+))",
    # a YAML / INI / .properties-style assignment of a lower-case name ending with a secret suffix after '_'
    # (db_password: …, app_secret = …, stripe_api_key: …, my_access_token: …; the key=value pattern above wants the
    # name to start a word, and db_password has none before 'password'): its value, a quoted one whole, else up to
    # whitespace, &, ;, a comma or a quote. The suffix must end the name (not max_tokens, db_password_file), and
    # _token only after a credential's word (_access_, _auth_, _refresh_, _session_, _api_, _bot_, _id_: not
    # page_token, next_token, eos_token). Lower case only (an UPPER_CASE name is the pattern above's). Starting with
    # the literal '_' (re scans for it; a leading \b alternative made it try every position: ~8 us on 300 bytes)
    r"_(?:pass(?:word|wd|phrase)|pwd|secret(?:_?key)?|api_?key|private_?key|access_?key"
    r"|(?:access|auth|refresh|session|api|bot|id)_?token)"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_lc_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_lc_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_lc>[^\s&;,\x22\x27\u27e6]+))",
    # a camelCase name ending with a Capitalised secret word (dbPassword, mysqlPassword, adminPwd, appSecret,
    # stripeSecretKey, minioAccessKey, myAccessToken, myGitHubToken: a config or log printed by a tool, "dbPassword":
    # "…" inside a longer text), as the dict key's *password / *secret / … suffixes are: its value, a quoted one
    # whole; the key=value patterns above want the word to start a word (\bpassword). Token only after a
    # credential's or a service's Capitalised word (not maxTokens, pageToken, nextPageToken). Case-sensitive, starting
    # with the suffix (no leading [a-z]: re would try every letter), each alternative with its capital letter (re then
    # skips to a capital: ~0.3 us on 100 bytes, not 12 us); its required literals (Pass, Pwd, Secret, Key, Token) gate it
    r"(?:Pass(?:word|wd)|Pwd|Secret(?:_?Key)?|A(?:pi|ccess)_?Key|A(?:ccess|uth|pi)Token|B(?:ot|earer)Token"
    r"|S(?:ession|lack)Token|G(?:it[Hh]ub|it[Ll]ab|h)Token|I(?:d|D)Token|R(?:efresh|oot)Token|D(?:eploy|ocker)Token"
    r"|O(?:Auth|auth)Token|PrivateToken|W(?:ebhook|ebHook)Token|N(?:pm|PM)Token|H(?:f|F)Token)"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_camel_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_camel_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_camel>[^\s&;,\x22\x27\u27e6]+))",
    # a lower-case <service>_token (github_token, gh_token, gitlab_token, npm_token, slack_token, hf_token: the default
    # dict keys' names, and like ones) in a YAML / INI / .env text: the pattern above starting with '_' wants a
    # credential's word between '_' and token (my_access_token); not page_token, next_token, eos_token, max_tokens.
    # Each name whole is a required literal gating its search (not '_token': input_tokens is in most model payloads)
    r"(?:github_token|gh_token|gitlab_token|npm_token|slack_token|hf_token)"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_svc_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_svc_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_svc>[^\s&;,\x22\x27\u27e6]+))",
    # a lower-case name run together with a secret word (mypassword=…, dbpasswd: …, appsecret = '…', stripeapikey=…,
    # minioaccesskey: …, myaccesstoken=…, githubtoken=…, githubToken: …): the patterns above want the word to start a
    # word (\bpassword) or to follow '_' or a capital (db_password, dbPassword): its value, a quoted one whole. The
    # word must end the name (not passwordless=, max_tokens, pageToken, "the password policy"); no leading \b
    # (password=… is the key=value pattern's first, and a value already a marker is no match). Six patterns, each
    # starting with its literal (pass, secret, api, access, token, Token: needles the patterns above have already, so
    # the quick scan looks for no more): re then finds the literal as str.find does (~2 ns a character), where one
    # alternation of them made it try the alternation at most letters (~50 ns a character: 0.4-0.8 ms on an 8 KB model
    # call holding max_tokens). A token's word before it is a positive lookbehind (sound for the quick check: it looks
    # at characters of the same string)
    r"pass(?:word|wd|phrase)"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_run_pw_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_run_pw_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_run_pw>[^\s&;,\x22\x27\u27e6]+))",
    r"secret(?:key)?"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_run_secret_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_run_secret_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_run_secret>[^\s&;,\x22\x27\u27e6]+))",
    r"api(?:key|token)"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_run_api_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_run_api_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_run_api>[^\s&;,\x22\x27\u27e6]+))",
    r"access(?:key|token)"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_run_access_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_run_access_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_run_access>[^\s&;,\x22\x27\u27e6]+))",
    r"token(?:(?<=authtoken)|(?<=refreshtoken)|(?<=sessiontoken)|(?<=bottoken)|(?<=githubtoken)|(?<=gitlabtoken)"
    r"|(?<=slacktoken)|(?<=npmtoken)|(?<=ghtoken)|(?<=hftoken))"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_run_token_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_run_token_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_run_token>[^\s&;,\x22\x27\u27e6]+))",
    r"Token(?:(?<=githubToken)|(?<=gitlabToken)|(?<=slackToken)|(?<=npmToken)|(?<=ghToken)|(?<=hfToken))"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_run_svc_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_run_svc_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_run_svc>[^\s&;,\x22\x27\u27e6]+))",
    # an API key header or setting written API-Key / API_Key / APIKey (X-API-Key: … in a request dump or a curl -H, the
    # default key x-api-key's header as most docs spell it): the key=value pattern takes Api-Key, api_key and API_KEY
    # only. Starting with its literal 'API' (a needle already)
    r"API[-_]?(?:Key|Token)"
    r"[\x22\x27]?[\t ]*[:=][\t ]*(?:\x22(?P<redact_api_mixed_dq>[^\x22\r\n\u27e6]+)\x22|\x27(?P<redact_api_mixed_sq>[^\x27\r\n\u27e6]+)\x27"
    r"|[\x22\x27]?(?P<redact_api_mixed>[^\s&;,\x22\x27\u27e6]+))",
    # well-known token formats, found by their prefix alone (no key name before them: a token pasted into prose, a
    # config dump, a URL): Google API keys (AIza + 35), Stripe secret and restricted keys (sk_live_, rk_live_, sk_test_,
    # rk_test_) and webhook secrets (whsec_), GitLab personal access tokens (glpat-), Slack app and refresh tokens
    # (xapp-, xoxe-; xoxb- and the like are above), npm (npm_ + 36), Hugging Face (hf_ + 34 letters), SendGrid
    # (SG.<22>.<43>), PyPI upload tokens (pypi-AgEIcHlwaS5vcmc…), Shopify (shpat_ / shpss_ / shpca_ / shppa_ + 32 hex),
    # DigitalOcean (dop_v1_ / doo_v1_ / dor_v1_ + 64 hex): the token whole. Each its own pattern starting with its
    # literal (or a class of two or three letters before it; its required literal, a scan needle, gates its search) and
    # the word boundary before it a lookbehind after it ('\bAIza' makes re try every position: ~70 ms on 1 MB holding
    # one, against ~0.5 ms), so that 'task_live_…', 'myhf_…' are no match
    r"AIza(?<=\bAIza)[0-9A-Za-z_-]{35}",
    r"[rs]k_live_(?<=\b[rs]k_live_)[0-9A-Za-z]{10,}",
    r"[rs]k_test_(?<=\b[rs]k_test_)[0-9A-Za-z]{10,}",
    r"whsec_(?<=\bwhsec_)[0-9A-Za-z+/=]{20,}",
    r"glpat-(?<=\bglpat-)[0-9A-Za-z_-]{20,}",
    r"xapp-(?<=\bxapp-)[0-9A-Za-z-]{20,}",
    r"xoxe-(?<=\bxoxe-)[0-9A-Za-z-]{20,}",
    r"npm_(?<=\bnpm_)[0-9A-Za-z]{36}",
    r"hf_(?<=\bhf_)[A-Za-z]{34}",
    r"SG\.(?<=\bSG\.)[0-9A-Za-z_-]{22}\.[0-9A-Za-z_-]{43}",
    r"pypi-AgEIcHlwaS5vcmc[0-9A-Za-z_-]{50,}",
    r"shp(?:at|ss|ca|pa)_(?<=\bshpat_|\bshpss_|\bshpca_|\bshppa_)[0-9a-fA-F]{32}",
    r"do[opr]_v1_(?<=\bdo[opr]_v1_)[0-9a-f]{64}",
    # a Slack incoming webhook's URL (https://hooks.slack.com/services/T…/B…/SECRET): its last part, the secret (the
    # workspace and channel ids stay)
    r"hooks\.slack\.com/services/T[0-9A-Z]+/B[0-9A-Z]+/(?P<redact_slack_hook>[0-9A-Za-z]{16,})",
    # user:password@ in a URL whose password holds '/' (postgres://app:s3cr/t@db/prod: SQLAlchemy and others take it;
    # the pattern above stops at '/'): the whole match, as above. Not a port before a path (http://localhost:3000/u/@me,
    # https://h:8443/a@b: the part before the first '/' all digits), nor a path with no user (https://h/@alice); the
    # first segment read as digits then a non-digit (no backtracking), the rest bounded (256 characters): linear
    r"://[^\s:/@]+:[0-9]*[^\s@/0-9][^\s@/]*/[^\s@]{0,256}@",
    # a pre-signed URL's signature and session token (S3 / SigV4 query: X-Amz-Signature=…, X-Amz-Security-Token=…;
    # Google Cloud Storage V4: X-Goog-Signature=…): anyone holding the URL has the object until it expires. Only the
    # value (up to &, whitespace, a quote); the other parameters stay. Case-sensitive, as the services write them
    r"X-(?:Amz-S(?:ignature|ecurity-Token)|Goog-Signature)=(?P<redact_presigned>[^\s&\x22\x27\u27e6]+)",
    # a .netrc entry whose password follows an account field (machine H login U account A password PW, machine H
    # account A password PW login U: the tokens come in any order; the .netrc pattern above wants login then password):
    # the password; 1 to 4 login / account fields before it (bounded: linear; not 'the machine login password is …').
    # A password right after the host is not found (no telling 'machine login password is' from it). Its required
    # literal is 'password'
    r"(?:machine\s+[^\s\x22\x27]+|default)(?:\s+(?:login|account)\s+[^\s\x22\x27]+){1,4}\s+password\s+"
    r"[\x22\x27]?(?P<redact_netrc_any>[^\s\x22\x27\u27e6]+)",
    # an API key or token named in two words (API Key: …, Api token = …, api key: … in a log line or a README's
    # example): its value when it holds a digit or is at least 20 characters (a credential; not 'API key: required',
    # 'API Key: see below'). Two patterns starting with their literal 'pi ' / 'PI ' and the word's first letter a
    # lookbehind ('(?:API|Api|api) ' makes re try each 'a': ~10 ms on 1 MB holding 'api', against ~0.5 ms)
    r"pi (?<=\bapi |\bApi )(?:[Kk]ey|KEY|[Tt]oken|TOKEN)"
    r"[\x22\x27]?[\t ]*[:=][\t ]*[\x22\x27]?(?P<redact_api_space>[A-Za-z0-9._~+/=-]*[0-9][A-Za-z0-9._~+/=-]*|[A-Za-z0-9._~+/=-]{20,})",
    r"PI (?<=\bAPI )(?:[Kk]ey|KEY|[Tt]oken|TOKEN)"
    r"[\x22\x27]?[\t ]*[:=][\t ]*[\x22\x27]?(?P<redact_api_space_uc>[A-Za-z0-9._~+/=-]*[0-9][A-Za-z0-9._~+/=-]*|[A-Za-z0-9._~+/=-]{20,})",
)

#: The default patterns and the ones they replaced: valid, none can match the empty string (not compiled to check).
_BUILT_IN_PATTERNS = frozenset(DEFAULT_PATTERNS) | frozenset(_LINEAR_EQUIVALENTS)

#: A pattern's groups named ``redact…`` (``(?P<redact>…)``): where one took part in a match, only its
#: text is replaced by the marker (the key name before it stays readable); otherwise the whole match is.
VALUE_GROUP_PREFIX = "redact"


#: The content fields a redaction path may start with (``CONTENT_FIELDS`` of
#: :mod:`sealbox.events`, and a note's ``about``).
PATH_ROOTS = ("about", "arguments", "detail", "inputs", "request", "response", "result", "state")


def path_problem(path: str) -> str:
    """Why a redaction ``path`` could never redact anything ('' when it could): an empty segment,
    or a first segment that names no content field (``user.ssn`` for ``arguments.user.ssn``)."""
    parts = path.split(".")
    if any(not part for part in parts):
        return f"redaction path {path!r} has an empty segment (e.g. arguments.user.ssn)"
    if not any(fnmatch.fnmatchcase(root, parts[0]) for root in PATH_ROOTS):
        return (f"redaction path {path!r} starts with no content field: a path starts with one of "
                f"{', '.join(PATH_ROOTS)} (e.g. arguments.{path})")
    return ""


def pattern_problem(pattern: Any, *, empty_ok: bool = False) -> str:
    """Why ``pattern`` cannot be a redaction pattern ('' when it can): not a string, not a
    regular expression ``re.compile`` accepts (a syntax error, a repeat count too large such as
    ``a{99999999999}``, groups nested too deeply), or, unless ``empty_ok``, one that can match the
    empty string (``x*``, ``^``, ``\\b``, ``(?=a)``): its empty matches fall between any two characters
    of every string, dict keys included, and each would become a marker."""
    if type(pattern) is not str:
        return f"redaction pattern {pattern!r} is not a string"
    if pattern in _BUILT_IN_PATTERNS:  # Sealbox's own (tests/store/test_redactor_plans.py checks them): no compile
        return ""
    return _pattern_problem(pattern, empty_ok)


@functools.lru_cache(maxsize=1024)
def _pattern_problem(pattern: str, empty_ok: bool) -> str:
    """:func:`pattern_problem` of a string, once per process (a store's pinned patterns are checked at each open)."""
    try:
        rx = re.compile(pattern)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        why = ("it is nested too deeply" if isinstance(exc, RecursionError)
               else f"a number in it is too large ({exc})" if isinstance(exc, OverflowError) else str(exc))
        return f"redaction pattern {_brief(pattern)} is not a valid regular expression: {why}"
    if not empty_ok and _can_match_empty(pattern, rx):
        return (f"redaction pattern {_brief(pattern)} can match the empty string (its empty matches would put markers "
                "into strings that hold no secret, dict keys included); make every match at least one character long")
    return ""


#: Texts searched for a zero-width match, besides what the parsed pattern's minimum width tells.
_EMPTY_SAMPLES = ("", "a", "ab", "a b", "0", " ", "\n", "A-1_b.c")


def _can_match_empty(pattern: str, rx: "re.Pattern[str]") -> bool:
    """Whether some match of ``pattern`` can be empty: the minimum width of the parsed pattern
    (CPython's own ``re._parser``) is 0, or a search of a few sample texts finds an empty match."""
    try:
        from re import _parser

        if _parser.parse(pattern).getwidth()[0] == 0:
            return True
    except Exception:  # noqa: BLE001 - an unknown construct: the samples decide
        pass
    for sample in _EMPTY_SAMPLES:
        for found in rx.finditer(sample):
            if found.end() == found.start():
                return True
    return False


def _brief(text: str, limit: int = 80) -> str:
    """``repr(text)``, cut to about ``limit`` characters (a 1,000-character regex in an error line)."""
    return repr(text) if len(text) <= limit else repr(text[: limit - 1]) + "…"


@dataclass(frozen=True)
class ContentPolicy:
    """A store's content settings.

    Attributes:
        mode: one of :data:`CONTENT_MODES`.
        keys: key names to redact (exact, case-insensitive).
        paths: dotted paths from a content field (``arguments.user.ssn``,
            ``request.messages.*.content``; ``*`` matches any key or index).
        patterns: regular expressions whose matches inside strings are redacted.
    """

    mode: str = "redacted"
    keys: tuple[str, ...] = DEFAULT_KEYS
    paths: tuple[str, ...] = ()
    patterns: tuple[str, ...] = DEFAULT_PATTERNS

    def __post_init__(self) -> None:
        self._check(empty_ok=False)

    def _check(self, empty_ok: bool) -> None:
        if self.mode not in CONTENT_MODES:
            raise ConfigError(f"content mode must be one of {', '.join(CONTENT_MODES)}, not {self.mode!r}")
        for pattern in self.patterns:
            if problem := pattern_problem(pattern, empty_ok=empty_ok):
                raise ConfigError(problem)

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as kept in the store's metadata."""
        return {"mode": self.mode, "keys": list(self.keys), "paths": list(self.paths), "patterns": list(self.patterns)}

    def fingerprint(self) -> str:
        """``sha256:<hex>`` of the RFC 8785 bytes of :meth:`to_dict` (keys as the sorted set of their
        normalised names, which is how they are matched); recorded in the log when a
        store is created (the system run's ``content_policy`` label), so that a change made
        below Sealbox to the settings kept in the database is detected."""
        form = self.to_dict()
        form["keys"] = sorted({_norm_key(k) for k in self.keys})  # compared as a set of normalised names
        return "sha256:" + hashlib.sha256(canonical_bytes(form)).hexdigest()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ContentPolicy":
        """Inverse of :meth:`to_dict`. A pattern that can match the empty string is accepted here
        (a store created before such patterns were refused keeps its pinned settings, and opens)."""
        policy = cls.__new__(cls)
        for name, value in (("mode", d.get("mode", "redacted")), ("keys", tuple(d.get("keys", DEFAULT_KEYS))),
                            ("paths", tuple(d.get("paths", ()))), ("patterns", tuple(d.get("patterns", DEFAULT_PATTERNS)))):
            object.__setattr__(policy, name, value)
        policy._check(empty_ok=True)
        return policy


#: The searches a :class:`Redactor` builds from its policy (:meth:`Redactor._compile`), shared by the redactors of
#: equal settings in a process, and its own memos (:meth:`Redactor._build`); using any builds them.
_PLAN_ATTRS = frozenset((
    "_suffixes", "_keys", "_exact_keys", "_paths", "_searched", "_patterns", "_scrub_gates", "_any", "_quick",
    "_prefilters", "_key_marks", "_any_mark", "_literals", "_gated_relaxed", "_any_relaxed", "_named_rx", "_scan",
    "_pair_rx", "_json_gate", "_needles", "_passes", "_tables", "_tag_bits", "_gated", "_pattern_bits", "_always",
    "_key_bytes", "_suffix_bytes",
    "_seen", "_texts", "_texts_size", "_mask_patterns", "_mask_searches"))

#: (mode, keys, paths, patterns, whether the C scan is used) -> the searches built for them (the last 32 settings): compiling them takes tens of
#: milliseconds, paid once per process rather than per store opened.
_PLANS: dict[tuple, dict[str, Any]] = {}


@dataclass
class Redactor:
    """Applies a :class:`ContentPolicy` with a store's secret."""

    secret: bytes
    policy: ContentPolicy = field(default_factory=ContentPolicy)

    def __post_init__(self) -> None:
        # the searches are built on first use (:meth:`__getattr__`): a store opened to read never needs them
        pass

    def __getattr__(self, name: str) -> Any:
        """Build the searches (:meth:`_build`) on the first use of one of them, then return it: called
        only for an attribute not yet set, so a built redactor pays nothing for being lazy."""
        if name in _PLAN_ATTRS and "policy" in self.__dict__ and "_quick" not in self.__dict__:
            self._build()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _build(self) -> None:
        """Set the searches: taken from the process's plans for these settings (:data:`_PLANS`: compiled
        regexes and tables depend on the policy alone, not on the secret) or built and kept there; the
        per-redactor memos (what was seen, texts walked) start empty."""
        policy = self.policy
        key = (policy.mode, tuple(policy.keys), tuple(policy.paths), tuple(policy.patterns), _c_scan_text is not None)
        plan = _PLANS.get(key)
        if plan is None:
            built = _PlanBuilder(policy)
            plan = {name: built.__dict__[name] for name in _PLAN_ATTRS if name in built.__dict__}
            if len(_PLANS) >= 32:
                _PLANS.pop(next(iter(_PLANS)))
            _PLANS[key] = plan
        vars(self).update(plan)
        self._seen: dict[bytes, bool] = {}  # canonical text -> _clean's verdict (a few, small)
        # string -> (what the walk makes of it, whether it changed): a conversation resent every turn is
        # walked again each time (its JSON texts decline the quick check), its strings are not searched again
        self._texts: dict[str, tuple[str, bool]] = {}
        self._texts_size = 0
        self._mask_patterns: dict[int, tuple[int, ...]] = {}  # _searched_for's answers
        self._mask_searches: dict[int, tuple[re.Pattern[str], ...]] = {}  # _clean_text's, per scan answer

    def _compile(self) -> None:
        """The searches a policy needs (on a :class:`_PlanBuilder`, whose attributes :meth:`_build` shares)."""
        normalised = {_norm_key(k) for k in self.policy.keys}
        # "*name": a suffix (_KeyNames); the others exact
        self._suffixes = tuple(sorted({k[1:] for k in normalised if k.startswith("*") and len(k) > 1}))
        exact = {k for k in normalised if not k.startswith("*")}
        self._keys = _KeyNames(exact, self._suffixes) if self._suffixes else exact
        # the names a string is told from a secret by (own_values, _removed_from): exact only (a secret value such as
        # "hunter2-very-secret" ends with a suffix, and must still be scrubbed from what is recorded after it)
        self._exact_keys = frozenset(exact)
        self._paths = [p.split(".") for p in self.policy.paths]
        # the patterns searched: the pinned ones, a former default replaced by its linear-time equivalent
        patterns = self._searched = tuple(_LINEAR_EQUIVALENTS.get(p, p) for p in self.policy.patterns)
        self._patterns = [re.compile(p) for p in patterns]
        # per pattern, strings one of which each of its matches holds (None: no such string known), so that
        # _scrub runs a pattern's regex only on a text holding one: a substring test is a C-level scan, while
        # the patterns (a leading \b, alternations, (?i)) make re try every position of a long text
        self._scrub_gates = tuple(_text_gate(p) for p in patterns)
        # one combined search decides whether a string needs scrubbing at all (most do not)
        self._any = _combined(patterns)
        self._quick = _quick_ok(self.policy, self._any)
        self._prefilters = _prefilters(patterns) if self._quick else ()
        self._key_marks = tuple(f'"{k}":' for k in self._keys) + tuple(f'{k}":' for k in self._suffixes)
        # the same tests, one C-speed search each: any key mark; any relaxed (regex) prefilter
        self._any_mark = re.compile(_trie(self._key_marks)) if self._key_marks else None
        self._literals = tuple(lit for lit, _ in self._prefilters if lit is not None)
        # the other prefilters, each searched only when the text holds one of its pattern's required strings
        # (_text_gate: substring scans), the rest joined into one search
        relaxed = [(gate, rx) for (lit, rx), gate in zip(self._prefilters, self._scrub_gates) if lit is None]
        self._gated_relaxed = tuple((gate, rx) for gate, rx in relaxed if gate is not None)
        self._any_relaxed = _compile_any([rx.pattern for gate, rx in relaxed if gate is None])
        self._named_rx = _named_regex(self._keys, self._suffixes) if self._quick and (self._keys or self._suffixes) else None
        self._scan = _c_scan_text is not None and self._quick and self._scan_plan()
        self._pair_rx = _pair_regex(self._keys, self._suffixes) if self._quick and (self._keys or self._suffixes) else None
        # JSON held in a string is parsed only when a sensitive name may be in it (a quoted key or pair name,
        # its closing quote escaped when the JSON text is itself inside a JSON string held in the text)
        self._json_gate = (re.compile('(?:"' + _trie(self._keys) + "|" + _trie(self._suffixes) + r')\\*"')
                           if self._suffixes else re.compile('"' + _trie(self._keys) + r'\\*"') if self._keys else None)

    @property
    def key_names(self) -> frozenset:
        """The exact sensitive key names as compared (normalised: lower case, no ``-`` or ``_``; not the suffixes)."""
        return self._exact_keys

    def marker(self, value: Any) -> dict[str, str]:
        """``{"$redacted": "hmac-sha256:<hex>"}`` for a strict JSON value (a string holding a lone
        surrogate, as one parsed from a JSON text's ``\\ud800`` escape: hashed as its encoded form,
        ``{"$badstr": ...}``, docs/canonical.md)."""
        try:
            data = canonical_bytes(value)
        except CanonicalizationError:
            data = canonical_bytes(encode(value))
        digest = hmac.new(self.secret, data, hashlib.sha256).hexdigest()
        return {MARKER_TAG: "hmac-sha256:" + digest}

    def apply(self, name: str, value: Any, data: bytes | None = None) -> tuple[Any, bool]:
        """Redact one content field's (encoded, strict JSON) value.

        Args:
            name: the content field (``arguments``, ``result``, ...), the root of ``paths``.
            value: the field's value.
            data: its canonical bytes, when the caller has them already.

        Returns:
            (the value to store, whether anything was redacted).
        """
        mode = self.policy.mode
        if mode == "full":
            return value, False
        if mode == "hashes-only":
            return self.marker(value), True
        if self._quick and self._clean(value, data):
            return value, False
        changed = [False]
        out = self._walk(value, [name], changed)
        return out, changed[0]

    def surely_clean(self, value: Any, data: bytes | None = None) -> bool:
        """True only when no content field holding ``value`` (or any part of it) would be
        changed in ``redacted`` mode: the policy allows the quick decision (no paths; see
        :func:`_quick_ok`) and :meth:`_clean` finds nothing in its canonical text. A part's
        canonical text lies verbatim inside the whole's, between JSON delimiters, so what
        the searches would find in the part they find in the whole."""
        return self._quick and self._clean(value, data)

    def _clean(self, value: Any, data: bytes | None = None) -> bool:
        """True only when :meth:`_walk` provably changes nothing, decided on the value's
        canonical text with C-speed searches instead of a Python walk: no escape in the
        text (so every key and string appears verbatim between quotes), no tag whose
        content the walk decodes (``$bytes``, ``$badstr``) or whose keys are not written
        as ``"key":`` (``$map``), no sensitive key as ``"key":`` (lower-cased; keys are
        ASCII, see :func:`_quick_ok`), and no pattern match anywhere in the text.

        The answer depends on the text alone: the last few (up to 16 KiB each) are kept,
        since a call's arguments are checked when the policy sees them and again when
        they are recorded."""
        try:
            if data is None:
                data = canonical_bytes_encoded(value)
        except Exception:  # noqa: BLE001 - the walk decides
            return False
        seen = self._seen
        known = seen.get(data)
        if known is not None:
            return known
        verdict = self._clean_text(data)
        if len(data) <= 16384:
            if len(seen) >= 8:
                seen.clear()
            seen[data] = verdict
        return verdict

    def _scan_plan(self) -> bool:
        """Set up :meth:`_clean_text`'s one-pass C scan (``sealbox._speedups.scan_text``, which
        declines any text with a backslash): the tags as needles, each pattern's required literals
        (:func:`_required_literals`) as needles that gate its search (the pattern itself: the
        searched text holds every string verbatim between quotes, see :func:`_quick_ok`), the
        sensitive keys as normalised bytes. More than 128 needles are looked for in passes of 128 (the keys in the first).
        False (the regex searches decide) when a configured suffix is longer than 64 bytes."""
        needles: list[bytes] = [b'"$bytes"', b'"$badstr"', b'"$map"', b'"$lossy"']
        folded = 0
        gated: list[tuple[int, re.Pattern[str]]] = []
        always: list[re.Pattern[str]] = []
        index: dict[tuple[bytes, bool], int] = {}
        pattern_bits: list[int] = []  # per pattern, in order: the bits of its needles (-1: none known, always searched)
        for pattern, rx in zip(self._searched, self._patterns):
            required = _required_literals(pattern)
            if required is None:
                always.append(rx)
                pattern_bits.append(-1)
                continue
            bits = 0
            for needle, fold in required:
                j = index.get((needle, fold))
                if j is None:  # a needle two patterns require (PASSW, SECRET) is looked for once
                    j = index[needle, fold] = len(needles)
                    folded |= (1 << j) if fold else 0
                    needles.append(needle)
                bits |= 1 << j
            gated.append((bits, rx))
            pattern_bits.append(bits)
        # scan_text looks for at most _SCAN_NEEDLES (128) needles per pass: more (a store adding many custom patterns)
        # are looked for in further passes, their bits shifted above the first pass's (one pass more per 128 needles,
        # instead of the regex searches deciding every text)
        self._needles = tuple(needles)
        self._passes = tuple((self._needles[k:k + _SCAN_NEEDLES], _scan_tables(self._needles[k:k + _SCAN_NEEDLES], folded >> k), k)
                             for k in range(0, len(needles), _SCAN_NEEDLES))
        self._tables = self._passes[0][1]
        self._tag_bits = 0b1111
        self._gated = tuple(gated)
        self._pattern_bits = tuple(pattern_bits)
        self._always = tuple(always)
        # by length, then bytes: scan_text bisects them (keys_sorted)
        self._key_bytes = tuple(sorted((k.encode() for k in self._keys), key=lambda k: (len(k), k)))
        suffixes = tuple(k.encode() for k in self._suffixes)
        if any(len(k) > 64 for k in suffixes):
            return False  # a configured suffix longer than the scan compares: the regex searches decide
        self._suffix_bytes = _suffix_table(suffixes)
        return True

    def _clean_text(self, data: bytes) -> bool:
        if self._scan:  # the C scan also finds a [name, value] pair named as a sensitive key (["Cookie",), and
            # a member "name" / "key" whose string is one ({"name":"Cookie","value":…}, Redactor._names_a_key)
            found = _c_scan_text(data, self._passes[0][0], self._tables, self._key_bytes, True, self._suffix_bytes)  # sorted
            if found >= 0:
                for needles, tables, shift in self._passes[1:]:  # more than 128 needles (see _scan_plan)
                    found |= _c_scan_text(data, needles, tables, (), False, b"") << shift
            if found == 0 and not self._always:
                return True
            if found < 0 or found & self._tag_bits:
                return False
            searches = self._mask_searches.get(found)  # the patterns to search, kept for a few masks
            if searches is None:
                searches = tuple(rx for bits, rx in self._gated if found & bits) + self._always
                if len(self._mask_searches) >= 256:
                    self._mask_searches.clear()
                self._mask_searches[found] = searches
            if not searches:
                return True
            try:
                text = data.decode("utf-8")
            except Exception:  # noqa: BLE001 - the walk decides
                return False
            return all(rx.search(text) is None for rx in searches)
        try:
            text = data.decode("utf-8")
        except Exception:  # noqa: BLE001 - the walk decides
            return False
        if "\\" in text or '"$bytes"' in text or '"$badstr"' in text or '"$map"' in text or '"$lossy"' in text:
            return False
        if self._any_mark is not None and self._any_mark.search(_norm_key(text)) is not None:
            return False
        if self._pair_rx is not None and b'["' in data and self._pair_rx.search(data) is not None:
            return False  # a [name, value] pair named as a sensitive key (see _pair_regex)
        if self._named_rx is not None and self._named_in(data):
            return False  # {"name": "Authorization", "value": …}: see Redactor._names_a_key
        lowered = text.lower() if self._literals or self._gated_relaxed else ""
        if self._literals:
            if any(literal in lowered for literal in self._literals):
                return False
        for gate, rx in self._gated_relaxed:
            for literal, folded in gate:  # (a loop, not any() of a generator: ~0.2 us less per pattern)
                if literal in (lowered if folded else text):
                    if rx.search(text) is not None:
                        return False
                    break
        return all(rx.search(text) is None for rx in self._any_relaxed)

    def _named_in(self, data: bytes) -> bool:
        """Whether canonical text (no backslash in it) holds a member ``name`` / ``key`` (any case)
        whose string names a sensitive key (:meth:`_names_a_key`): each ``"name":"`` of the ASCII-lowered
        text (with no escape, quotes alternate open/close, so that is a member and its string) has the
        string after it normalised and looked up; a Kelvin sign (``"\u212aey"`` lower-cases to ``key``)
        leaves it to :func:`_named_regex`. Substring scans: a payload full of ``"name"`` members
        costs a lookup per member, not a regex trying every quote."""
        lowered = data.lower()
        if b"\xe2\x84\xaa" in lowered:
            return self._named_rx.search(data) is not None
        for member in (b'"name":"', b'"key":"'):
            i = lowered.find(member)
            while i >= 0:
                start = i + len(member)
                end = lowered.find(b'"', start)
                if end < 0:
                    return True  # not canonical text: the walk decides
                try:
                    if _norm_key(data[start:end].decode("utf-8")) in self._keys:
                        return True
                except UnicodeDecodeError:
                    return True
                i = lowered.find(member, end)
        return False

    def apply_error(self, error: dict[str, Any]) -> dict[str, Any]:
        """Redact an ``{"type", "message", "traceback"}`` error: patterns in
        ``redacted`` mode; in ``hashes-only`` mode only the type is kept in clear."""
        mode = self.policy.mode
        if mode == "full":
            return error
        out = dict(error)
        for field_name in ("message", "traceback"):
            text = out.get(field_name)
            if type(text) is not str:
                continue
            if mode == "hashes-only":
                out[field_name] = self.marker(text)[MARKER_TAG]
            else:
                out[field_name] = self._scrub(text, [False])
        return out

    def scrub_label(self, label: str, secrets: "list[str] | tuple[str, ...]" = ()) -> str:
        """A name the caller wrote (a ``state.saved`` label) as the store keeps it: the patterns'
        matches, and every occurrence of each of ``secrets`` (the values a sensitive key name or a
        configured path takes out of the event's state, :meth:`secret_values`; in ``redacted`` mode
        also the values redacted earlier in the run), replaced by in-string markers unless the mode
        is ``full`` (in ``hashes-only`` too: the label stays a readable name, as tool names do, but
        holds no secret a pattern or a key name finds)."""
        if self.policy.mode == "full" or not label:
            return label
        label = self._scrub(label, [False])
        return self.scrub_values(label, secrets) if secrets else label

    def redact_labels(self, labels: dict[str, Any]) -> dict[str, Any]:
        """A run's labels (``run.started``) as the store keeps them, unless the mode is ``full``: a
        label under a sensitive key name (``api_key``, ``password``, ...) becomes the in-string
        marker of its value, ``⟦redacted:hmac-sha256:<hex>⟧`` (the HMAC of the value's
        ``{"$redacted": …}`` marker in a content field; a label stays a string), and the patterns'
        matches in the other values and in the keys become in-string markers, as in free text
        (``postgres://u:⟦redacted:…⟧@host/db``). In ``hashes-only`` mode too: labels stay readable
        (policies match them, ``runs list --label`` filters on them) but hold no secret a pattern
        or a key name finds. A value that is a marker already (a replay's recorded labels) is kept.
        ``labels`` itself is returned when nothing changes."""
        if self.policy.mode == "full" or not labels:
            return labels
        out: dict[str, Any] = {}
        changed = False
        for key, value in labels.items():
            new_key = self._scrub(key, [False]) if type(key) is str else key
            if type(value) is str:
                if type(key) is str and _norm_key(key) in self._keys and not _WHOLE_MARKER.fullmatch(value):
                    new_value: Any = f"⟦redacted:{self.marker(value)[MARKER_TAG]}⟧"
                else:
                    new_value = self._scrub(value, [False])
            else:  # (an imported run's label may be a number or a bool: nothing in it to find)
                new_value = value
            changed = changed or new_key != key or new_value is not value
            out[new_key] = new_value
        return out if changed else labels

    def label_secrets(self, labels: dict[str, Any]) -> list[str]:
        """The values :meth:`redact_labels` makes a marker of by their sensitive key name (at least 4
        characters, as :meth:`removed_strings` lists an argument's): a run's redacted values, scrubbed
        from what the run records after it (a result, a model response, a note, an error text)."""
        if self.policy.mode == "full":
            return []
        return [value for key, value in labels.items()
                if type(key) is str and type(value) is str and len(value) >= 4 and _norm_key(key) in self._keys
                and not _WHOLE_MARKER.fullmatch(value)]

    def secret_values(self, name: str, value: Any) -> list[str]:
        """The strings of at least 4 characters that a sensitive key name or a configured path
        makes a ``{"$redacted": …}`` marker of in a content field's encoded ``value`` (``name``: the
        field, the root of ``paths``), longest first, as :func:`own_values` lists them — whatever the
        mode but ``full`` (``[]``): in ``hashes-only`` mode the whole value is one marker, and these
        are the strings that mode would still have to keep out of a readable name beside it."""
        if self.policy.mode == "full":
            return []
        changed = [False]
        out = self._walk(value, [name], changed)
        return own_values(value, out, keys=self.key_names) if changed[0] else []

    def removed_strings(self, name: str, value: Any, minimum: int = 4) -> list[str]:
        """The strings :meth:`apply` takes out of a content field's (encoded) value in ``redacted``
        mode by a sensitive key name or a configured path — every string inside the value that
        becomes a marker (dict keys aside; ``$bytes`` / ``$badstr`` decoded), of at least ``minimum``
        characters, longest first — so that they can be taken out of an error text too
        (:meth:`scrub_values`). Pattern matches are not listed: :meth:`apply_error` finds those
        itself. Empty in the other modes (``full`` keeps everything; ``hashes-only`` keeps only an
        error's type)."""
        if self.policy.mode != "redacted":
            return []
        out, changed = self.apply(name, value)
        return _removed_from(value, out, minimum, self._exact_keys) if changed else []

    def scrub_echoes(self, name: str, value: Any, known: "list[str] | tuple[str, ...] | set[str]",
                     minimum: int = 4, direct: bool = False) -> tuple[list[str], Any, bool]:
        """A content field's (encoded) value as a run records it in ``redacted`` mode once values
        have been redacted: what the store would keep in clear is scrubbed of ``known`` (the values
        redacted earlier in the run) and of the values :meth:`removed_strings` takes out of
        ``value`` itself, each occurrence becoming the in-string marker of that string (as
        :meth:`scrub_values_in` does); the parts the store redacts (by key name, path or pattern)
        are left as they are, so the store still makes them its markers as before.

        ``direct``: the strings redacted from ``value`` itself are only those that were a redacted
        value themselves (:func:`own_values`), not every string inside a redacted list or dict.

        Returns:
            (the strings redacted from ``value`` itself, longest first (:meth:`removed_strings`),
            the value to record, whether it differs from ``value``); the value is ``value`` itself
            when nothing was scrubbed. Outside ``redacted`` mode: ``([], value, False)``.
        """
        if self.policy.mode != "redacted":
            return [], value, False
        out, redacted = self.apply(name, value)
        own = (own_values(value, out, minimum, self._exact_keys) if direct
               else _removed_from(value, out, minimum, self._exact_keys)) if redacted else []
        wanted = set(known)
        wanted.update(own)
        if not wanted:
            return own, value, False
        scrubbed, changed = self.scrub_values_in(out, sorted(wanted))
        if not changed:  # nothing the store keeps in clear holds a value: recorded as given
            return own, value, False
        return own, _kept_parts(value, out, scrubbed) if redacted else scrubbed, True

    def scrub_values(self, text: str, values: "list[str] | tuple[str, ...]") -> str:
        """``text`` with every occurrence of each of ``values`` replaced by its in-string marker
        ``⟦redacted:hmac-sha256:<hex>⟧`` (the marker of the string, as in a content field), in one
        pass, longest value first."""
        wanted = [v for v in values if v and v in text]
        if not wanted:
            return text
        wanted.sort(key=lambda v: (-len(v), v))
        rx = re.compile("|".join(re.escape(v) for v in wanted))
        return _sub_outside_markers(rx, text, lambda m: f"⟦redacted:{self.marker(m.group(0))[MARKER_TAG]}⟧")

    def scrub_values_in(self, value: Any, values: "list[str] | tuple[str, ...]") -> tuple[Any, bool]:
        """An encoded content value with every occurrence of each of ``values`` replaced by its
        in-string marker ``⟦redacted:hmac-sha256:<hex>⟧`` (as :meth:`scrub_values` does in a text).

        For a tool's result that echoes what redaction took out of the call's arguments
        (docs/content-modes.md). Strings and dict keys are scrubbed in place; inside a
        ``$bytes`` or ``$badstr`` tag the value's UTF-8 bytes are replaced by the marker's (the
        tag and its type are kept); ``$redacted`` markers and ``$blob`` references are left as
        they are; a tag's name is never changed. Occurrences are found in one pass, longest
        value first, so a marker is never scrubbed again.

        Args:
            value: a strict JSON value as :func:`sealbox.canonical.encode` returns it.
            values: the strings to take out (empty: nothing changes).

        Returns:
            (the value, whether anything was replaced); the value is ``value`` itself when
            nothing was. Never raises on a well-formed encoded value.
        """
        wanted = sorted({v for v in values if type(v) is str and v}, key=lambda v: (-len(v), v))
        if not wanted:
            return value, False
        text_rx = re.compile("|".join(re.escape(v) for v in wanted))
        bytes_rx = re.compile(b"|".join(re.escape(v.encode("utf-8", "surrogatepass")) for v in wanted))
        changed = [False]

        def text(t: str) -> str:
            if text_rx.search(t) is None:
                return t
            out = _sub_outside_markers(text_rx, t, lambda m: f"⟦redacted:{self.marker(m.group(0))[MARKER_TAG]}⟧")
            if out != t:
                changed[0] = True
            return out

        def b64(tag: str, inner: str) -> str:
            import base64

            try:
                raw = base64.b64decode(inner, validate=True)
            except ValueError:
                return inner
            if bytes_rx.search(raw) is None:
                return inner
            changed[0] = True
            return base64.b64encode(bytes_rx.sub(
                lambda m: f"⟦redacted:{self.marker(m.group(0).decode('utf-8', 'surrogatepass'))[MARKER_TAG]}⟧"
                .encode("utf-8"), raw)).decode("ascii")

        def walk(v: Any) -> Any:
            t = type(v)
            if t is str:
                return text(v)
            if t is list:
                return [walk(x) for x in v]
            if t is not dict:
                return v
            if len(v) == 1:
                (tag, inner), = v.items()
                if type(tag) is str and tag.startswith("$"):  # a tag: its name stays
                    if tag in (MARKER_TAG, "$blob"):
                        return v
                    if tag in ("$bytes", "$badstr") and type(inner) is str:
                        return {tag: b64(tag, inner)}
                    if tag == "$esc" and type(inner) is dict:
                        return {tag: {text(k): walk(x) for k, x in inner.items()}}
                    return {tag: walk(inner)}
            return {text(k): walk(x) for k, x in v.items()}

        out = walk(value)
        return (out, True) if changed[0] else (value, False)

    def would_redact(self, name: str, value: Any) -> bool:
        """Whether :meth:`apply` would change ``value``."""
        return self.apply(name, value)[1]

    def _walk(self, value: Any, path: list[str], changed: list[bool]) -> Any:
        if self._path_hit(path):
            changed[0] = True
            return self.marker(value)
        if type(value) is dict:
            if len(value) == 1:
                tagged = self._walk_tag(value, path, changed)
                if tagged is not None:
                    return tagged
            if self._names_a_key(value):
                return self._named_members(value, path, changed)
            if value.get("type") == "object" and type(value.get("properties")) is dict:
                return self._schema(value, path, changed)
            return {self._scrub_key(k, changed): self._member(k, v, path, changed) for k, v in value.items()}
        if type(value) is list:
            if len(value) == 2 and type(value[0]) is str and value[1] is not None and _norm_key(value[0]) in self._keys:
                # a [name, value] pair (a header list: [("Cookie", "..."), ("Authorization", "...")]) named as a key
                changed[0] = True
                return [self._walk(value[0], path + ["0"], changed), self.marker(value[1])]
            if (len(value) == 2 and type(value[0]) is dict and value[1] is not None
                    and self._sensitive_tagged_key(value[0])):
                # the same pair named by bytes (ASGI's scope["headers"], httpx's headers.raw: (b"cookie", b"..."))
                changed[0] = True
                return [self._walk(value[0], path + ["0"], changed), self.marker(value[1])]
            return [self._walk(v, path + [str(i)], changed) for i, v in enumerate(value)]
        if type(value) is str:
            memo = self._texts if not self._paths else None  # without paths a string's redaction ignores where it is
            if memo is not None:
                known = memo.get(value)
                if known is not None:
                    if known[1]:
                        changed[0] = True
                    return known[0]
            before, inner = value, [False]
            if value[:1] in _JSON_OPENERS or value.lstrip()[:1] in _JSON_OPENERS:
                value = self._walk_json_text(value, path, inner)
            if self._patterns:
                value = self._scrub(value, inner)
            if inner[0]:
                changed[0] = True
            if memo is not None and len(before) >= 64:
                if self._texts_size > _TEXTS_BUDGET:
                    memo.clear()
                    self._texts_size = 0
                memo[before] = (value, inner[0])
                self._texts_size += len(before) + len(value)
        return value

    def _walk_json_text(self, text: str, path: list[str], changed: list[bool]) -> str:
        """A string holding a JSON object or array (a model's function-call ``arguments``, a tool
        returning ``json.dumps(...)``), or a JSON string that holds such a text (encoded twice), redacted as the value it holds: when the walk of the parsed
        value redacts something (a sensitive key name, a pair, a path continuing into it), the text
        becomes that value's JSON with each redacted part as its in-string marker
        ``"⟦redacted:hmac-sha256:<hex>⟧"``; otherwise ``text`` itself. Text that does not parse
        (or nests too deep to walk) is left to the patterns; so is, when no path is configured, one
        that names no sensitive key as a quoted string and holds no ``\\u`` escape (it cannot lose
        anything, and is not parsed). A text whose last character (trailing whitespace aside) cannot
        close what its first one opens (``"`` + 10 MB of prose) is not JSON, and is rejected before
        any scan of it."""
        if text.rstrip()[-1:] != _JSON_CLOSERS.get(text.lstrip()[:1]):
            return text  # json.loads would fail: a JSON text ends with the closer of its top-level value
        if not self._paths and "\\u" not in text and (
                self._json_gate is None or self._json_gate.search(_norm_key(text)) is None):
            return text
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            return text
        if type(parsed) is str:
            # JSON text encoded twice (a JSON string holding a JSON text: arguments some servers send
            # as "\"{\\\"password\\\": …}\""): the text it holds, redacted as any string is
            if parsed.lstrip()[:1] not in _JSON_OPENERS:
                return text
            inner = [False]
            try:
                out = self._walk(parsed, path, inner)
            except RecursionError:
                return text
            if not inner[0]:
                return text
            changed[0] = True
            return _escape_surrogates(json.dumps(out, ensure_ascii=False))
        if type(parsed) not in (dict, list):
            return text
        inner = [False]
        try:
            out = self._walk(parsed, path, inner)
        except RecursionError:
            return text
        if not inner[0]:
            return text
        changed[0] = True
        return _escape_surrogates(json.dumps(_markers_as_text(out), ensure_ascii=False, allow_nan=True))

    def _names_a_key(self, value: dict) -> bool:
        """Whether a dict names a sensitive key in a ``name`` / ``key`` member (any case: HAR's
        ``{"name": "Authorization", "value": "…"}``, a container env ``{"name": "PASSWORD", "value": …}``,
        AWS tags ``{"Key": "api_key", "Value": …}``): its ``value`` member is then the secret.
        :func:`_named_regex` finds every such dict in canonical text, for the quick check."""
        for k, v in value.items():
            if type(v) is str and type(k) is str and k.lower() in _NAME_MEMBERS and _norm_key(v) in self._keys:
                return True
        return False

    def _schema(self, value: dict, path: list[str], changed: list[bool]) -> dict:
        """A JSON Schema of an object (a tool's parameters in a model request, an MCP ``inputSchema``): its
        ``properties`` name parameters, so a parameter named ``password`` holds its schema (``{"type":
        "string", "description": …}``), no secret: each member that is an object is walked as content, not
        redacted whole (which also made the run take ``string`` for a redacted value, to scrub from all it
        recorded later). A member that is no object is a value under that name, redacted as usual."""
        out = {}
        for k, v in value.items():
            if k == "properties":
                sub = path + [k]
                out[self._scrub_key(k, changed)] = {
                    self._scrub_key(name, changed): (self._walk(schema, sub + [name], changed) if type(schema) is dict
                                                     else self._member(name, schema, sub, changed))
                    for name, schema in v.items()}
            else:
                out[self._scrub_key(k, changed)] = self._member(k, v, path, changed)
        return out

    def _named_members(self, value: dict, path: list[str], changed: list[bool]) -> dict:
        """A dict that :meth:`_names_a_key`: its ``value`` member (any case; not None) as a marker, the
        other members walked as usual."""
        out = {}
        for k, v in value.items():
            if type(k) is str and k.lower() == "value" and v is not None and not (
                    type(v) is str and _WHOLE_MARKER.fullmatch(v)):
                changed[0] = True
                out[self._scrub_key(k, changed)] = self.marker(v)
            else:
                out[self._scrub_key(k, changed)] = self._member(k, v, path, changed)
        return out

    def _member(self, key: str, value: Any, path: list[str], changed: list[bool]) -> Any:
        if _norm_key(key) in self._keys and value is not None:
            if type(value) is str and _WHOLE_MARKER.fullmatch(value):
                return value  # an in-string marker already (a value scrubbed before): marked again, it would not match
            changed[0] = True
            return self.marker(value)
        return self._walk(value, path + [key], changed)

    def _scrub_key(self, key: str, changed: list[bool]) -> str:
        return self._scrub(key, changed) if self._patterns else key

    def _walk_tag(self, value: dict, path: list[str], changed: list[bool]) -> Any:
        """Look inside the type tags of sealbox.canonical; None when ``value`` is no tag."""
        (tag, inner), = value.items()
        if tag == MARKER_TAG or tag == "$blob":
            return value
        if tag == "$esc" and type(inner) is dict:  # a user's dict with "$" keys: walk it as that dict
            if self._names_a_key(inner):
                return {tag: self._named_members(inner, path, changed)}
            return {tag: {self._scrub_key(k, changed): self._member(k, v, path, changed) for k, v in inner.items()}}
        if tag in _OBJECT_TAGS and type(inner) is dict and type(inner.get("fields")) is dict:
            # an object (a LangChain message, a dataclass) is its fields for paths, as a dict is:
            # result.content, request.messages.*.content, state.messages.*.content
            # (the spelled-out path, result.$pydantic.fields.content, still matches: a store configured
            # with it before kept redacting that text; the two segments are optional in _path_hit)
            return {tag: {k: self._walk(v, path + [(tag, k)], changed) if k == "fields"
                          else self._member(k, v, path + [tag], changed) for k, v in inner.items()}}
        if tag == "$map" and type(inner) is list:
            pairs = []
            for pair in inner:
                if type(pair) is list and len(pair) == 2 and type(pair[0]) is str:
                    pairs.append([self._scrub_key(pair[0], changed), self._member(pair[0], pair[1], path, changed)])
                elif type(pair) is list and len(pair) == 2 and self._sensitive_tagged_key(pair[0]) and pair[1] is not None:
                    changed[0] = True  # b"password", an Enum whose name or value is "Authorization", ...
                    pairs.append([self._walk(pair[0], path, changed), self.marker(pair[1])])
                else:
                    pairs.append(self._walk(pair, path, changed))
            return {tag: pairs}
        if tag == "$lossy" and type(inner) is dict and type(inner.get("repr")) is str:
            text = _norm_key(inner["repr"])  # a repr of an object we could not encode: no keys to look at
            if any(k in text for k in self._keys) or any(k in text for k in self._suffixes):
                changed[0] = True
                out = dict(inner)
                out["repr"] = f"⟦redacted:{self.marker(inner['repr'])[MARKER_TAG]}⟧"
                return {tag: self._walk(out, path, changed)}
            return None
        if tag in ("$bytes", "$badstr") and type(inner) is str:
            text = _decoded_text(tag, inner)
            if text is not None and any(p.search(text) for p in self._patterns):
                changed[0] = True
                return self.marker(value)
            return value
        return None

    def _sensitive_tagged_key(self, key: Any) -> bool:
        """Whether a non-``str`` key of a ``$map`` (bytes, an Enum, ...) names a sensitive key."""
        texts: list[str] = []
        if type(key) is dict and len(key) == 1:
            (tag, inner), = key.items()
            if tag in ("$bytes", "$badstr") and type(inner) is str:
                texts.append(_decoded_text(tag, inner) or "")
            elif tag == "$enum" and type(inner) is dict:
                texts += [v for v in (inner.get("name"), inner.get("value")) if type(v) is str]
        return any(_norm_key(t) in self._keys for t in texts)

    def _path_hit(self, path: list) -> bool:
        if not self._paths:
            return False
        for variant in _path_variants(path):
            for pattern in self._paths:
                if len(pattern) == len(variant) and all(fnmatch.fnmatchcase(p, q) for p, q in zip(variant, pattern)):
                    return True
        return False

    def _scrub(self, text: str, changed: list[bool]) -> str:
        """``text`` with each pattern's matches replaced (:meth:`_replacement`), pattern by pattern in
        the policy's order; a pattern whose required strings (:func:`_text_gate`) are all absent from
        the text as it then is cannot match and is not searched (one substring scan each instead of a
        regex trying every position: a 10 MB string is checked in milliseconds)."""
        if not self._patterns or (len(text) <= 8 and self._any is not None and self._any.search(text) is None):
            return text  # (a few characters: one search of them is quicker than the substring tests)
        lowered = None
        # with the C scan: one pass finds which patterns' required strings the text holds (the same needles
        # _clean_text looks for; ASCII case folding, the folded strings having no other Unicode case variant), instead
        # of a substring test per string per pattern (22 patterns: ~60 tests). None (a backslash, a lone surrogate, no
        # C scan): the substring tests. Once a match is replaced the text changed: the substring tests from there
        mask = self._text_mask(text)
        start = 0
        if mask is not None:
            # only the patterns whose required strings the text holds (or with none known), in the policy's order,
            # instead of a test per pattern (47 default patterns: ~1 us on a log line, a tenth of _scrub)
            for i in self._searched_for(mask):
                pattern = self._patterns[i]
                if pattern.search(text):
                    changed[0] = True
                    text = pattern.sub(self._replacement, text)
                    start = i + 1  # the text changed: the substring tests from the next pattern on
                    break
            else:
                return text
        patterns = self._patterns
        for i in range(start, len(patterns)):
            pattern, gate = patterns[i], self._scrub_gates[i]
            if gate is not None:
                for literal, folded in gate:
                    if folded:
                        if lowered is None:
                            lowered = text.lower()
                        if literal in lowered:
                            break
                    elif literal in text:
                        break
                else:
                    continue  # none of the strings every match holds: no match
            if pattern.search(text):
                changed[0] = True
                text = pattern.sub(self._replacement, text)
                lowered = None
        return text

    def _searched_for(self, mask: int) -> "tuple[int, ...]":
        """The indices of the patterns :meth:`_scrub` searches a text for whose :meth:`_text_mask` is ``mask``: those
        with a needle in ``mask`` or with no required strings known, in the policy's order (kept for a few masks)."""
        known = self._mask_patterns.get(mask)
        if known is None:
            known = tuple(i for i, bits in enumerate(self._pattern_bits) if bits == -1 or mask & bits)
            if len(self._mask_patterns) >= 256:
                self._mask_patterns.clear()
            self._mask_patterns[mask] = known
        return known

    def _text_mask(self, text: str) -> "int | None":
        """The needles of :meth:`_scan_plan` found in ``text`` (a bit mask, ``sealbox._speedups.scan_text`` with no
        keys), or None when the C scan is not there or declines it (a backslash) or the text is not UTF-8 encodable."""
        if not self._scan or _c_scan_text is None:
            return None
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            return None
        found = _c_scan_text(data, self._passes[0][0], self._tables, (), False, b"")
        if found < 0:
            return None
        for needles, tables, shift in self._passes[1:]:  # more than 128 needles (see _scan_plan)
            found |= _c_scan_text(data, needles, tables, (), False, b"") << shift
        return found

    def _replacement(self, m: "re.Match[str]") -> str:
        """The text a pattern's match becomes: the in-string marker of the match, or, where a group
        named ``redact…`` (:data:`VALUE_GROUP_PREFIX`) matched something, the match with only that
        group's text replaced by its marker."""
        for name in m.re.groupindex:
            if name.startswith(VALUE_GROUP_PREFIX):
                start, end = m.span(name)
                if end > start:
                    whole, base = m.group(0), m.start()
                    return (whole[: start - base] + f"⟦redacted:{self.marker(m.group(name))[MARKER_TAG]}⟧"
                            + whole[end - base:])
        return f"⟦redacted:{self.marker(m.group(0))[MARKER_TAG]}⟧"


def _path_variants(path: list) -> list[list[str]]:
    """The spellings of a walked path: an object's ``(tag, "fields")`` segment is left out (the object
    is its fields, ``result.content``) or written out (``result.$pydantic.fields.content``)."""
    variants: list[list[str]] = [[]]
    for segment in path:
        if type(segment) is tuple:
            if len(variants) < 64:
                variants += [v + list(segment) for v in variants]
        else:
            for v in variants:
                v.append(segment)
    return variants


_JSON_OPENERS = ("{", "[", '"')  # an object, an array, or a JSON string holding JSON text again (encoded twice)
_JSON_CLOSERS = {"{": "}", "[": "]", '"': '"'}  # the last character of a JSON text opened by each
_TEXTS_BUDGET = 8 << 20  # characters of the strings Redactor._texts keeps (it is emptied beyond)
#: Tags of objects encoded as their fields (docs/canonical.md): transparent to redaction paths.
_OBJECT_TAGS = ("$pydantic", "$dataclass")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogates(text: str) -> str:
    """A JSON text made with ``ensure_ascii=False`` whose strings hold lone surrogates (parsed from
    ``\\ud800`` escapes): each written back as its escape (the same JSON; UTF-8 cannot hold it)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _markers_as_text(value: Any) -> Any:
    """``value`` (a walked JSON value) with every ``{"$redacted": m}`` marker as the in-string marker ``⟦redacted:m⟧``."""
    if type(value) is dict:
        if len(value) == 1 and type(value.get(MARKER_TAG)) is str:
            return f"⟦redacted:{value[MARKER_TAG]}⟧"
        return {k: _markers_as_text(v) for k, v in value.items()}
    if type(value) is list:
        return [_markers_as_text(v) for v in value]
    return value


def own_values(before: Any, after: Any, minimum: int = 4, keys: "Any" = ()) -> list[str]:
    """The secret values :meth:`Redactor.apply` took out of ``before`` (giving ``after``) that an event
    is scrubbed of elsewhere in itself (docs/content-modes.md, "Values redacted earlier in the run"):
    each string (``$bytes`` / ``$badstr`` decoded) that was itself the redacted value, i.e. that a
    ``{"$redacted": …}`` marker replaced, of at least ``minimum`` characters, longest first. Unlike
    :func:`_removed_from`, the strings inside a redacted list or dict are not listed: a header pair
    ``["Cookie", ["Cookie", None]]`` has its value redacted, and the name ``"Cookie"`` inside it is
    no secret to take out of the pair's own name. ``keys``: the sensitive key names (normalised,
    :attr:`Redactor.key_names`): a string that is one of them is a name, never listed."""
    found: set[str] = set()
    _removed(before, after, found, direct=True)
    return sorted((s for s in found if len(s) >= minimum and _norm_key(s) not in keys), key=lambda s: (-len(s), s))


def _removed_from(before: Any, after: Any, minimum: int, keys: "Any" = ()) -> list[str]:
    """:func:`_removed` as a list: the strings of at least ``minimum`` characters, longest first,
    but for a sensitive key name (``keys``, normalised): ``"Cookie"`` inside a redacted pair
    ``["Cookie", ["Cookie", None]]`` is a header name, and taken out of everything recorded after it
    it would turn every mention of the header into a marker."""
    found: set[str] = set()
    _removed(before, after, found)
    return sorted((s for s in found if len(s) >= minimum and _norm_key(s) not in keys), key=lambda s: (-len(s), s))


def _kept_parts(before: Any, redacted: Any, scrubbed: Any) -> Any:
    """``scrubbed`` (``redacted``, the walk of ``before``, with values scrubbed from it) with
    ``before``'s own part wherever the walk put a ``{"$redacted": …}`` marker: a value given to the
    store again holds no marker (the store would keep one as the caller's data), and the store
    redacts those parts again, to the same markers. The walk keeps the shape; where it did not (it
    never should), the markers are written as in-string markers instead, so nothing is kept in clear."""
    if type(redacted) is dict and len(redacted) == 1 and type(redacted.get(MARKER_TAG)) is str:
        return before if before != redacted else scrubbed
    if type(redacted) is dict and type(before) is dict and type(scrubbed) is dict \
            and len(before) == len(redacted) == len(scrubbed):
        return {k: _kept_parts(b, r, s)
                for (k, s), b, r in zip(scrubbed.items(), before.values(), redacted.values())}
    if type(redacted) is list and type(before) is list and type(scrubbed) is list \
            and len(before) == len(redacted) == len(scrubbed):
        return [_kept_parts(b, r, s) for b, r, s in zip(before, redacted, scrubbed)]
    return _markers_as_text(scrubbed)


def _removed(before: Any, after: Any, found: set[str], direct: bool = False) -> None:
    """Collect into ``found`` the strings of ``before`` that :meth:`Redactor._walk` turned into
    markers in ``after`` (the walk keeps the shape, so the two are compared by position; a string
    holding JSON that the walk rewrote is compared as the values the two texts hold). ``direct``:
    only a string (or ``$bytes`` / ``$badstr``) that a marker replaced whole (:func:`own_values`)."""
    if before is after:
        return
    if type(before) is str and type(after) is str:
        try:
            _removed(json.loads(before), _unmark(json.loads(after)), found, direct)
        except (ValueError, RecursionError):
            pass
        return
    if type(after) is dict and len(after) == 1 and MARKER_TAG in after and after != before:
        if not direct:
            _strings(before, found)
        elif type(before) is str:
            found.add(before)
        elif type(before) is dict and len(before) == 1 and (
                type(before.get("$bytes")) is str or type(before.get("$badstr")) is str):
            _strings(before, found)
    elif type(before) is dict and type(after) is dict and len(before) == len(after):
        for b, a in zip(before.values(), after.values()):
            _removed(b, a, found, direct)
    elif type(before) is list and type(after) is list and len(before) == len(after):
        for b, a in zip(before, after):
            _removed(b, a, found, direct)


_WHOLE_MARKER = re.compile("⟦redacted:(hmac-sha256:[0-9a-f]{64})⟧")
_ANY_MARKER = re.compile("(⟦redacted:hmac-sha256:[0-9a-f]{64}⟧)")


def _sub_outside_markers(rx: "re.Pattern[str]", text: str, repl: Any) -> str:
    """``rx.sub(repl, text)`` leaving the in-string markers already in ``text`` as they are (a value
    of 4 hex digits is no reason to rewrite the digest of another value's marker)."""
    if "⟦redacted:" not in text:
        return rx.sub(repl, text)
    parts = _ANY_MARKER.split(text)
    return "".join(part if i % 2 else rx.sub(repl, part) for i, part in enumerate(parts))


def _unmark(value: Any) -> Any:
    """The inverse of :func:`_markers_as_text` for whole-string markers (for :func:`_removed`)."""
    if type(value) is str:
        m = _WHOLE_MARKER.fullmatch(value)
        return {MARKER_TAG: m.group(1)} if m else value
    if type(value) is dict:
        return {k: _unmark(v) for k, v in value.items()}
    if type(value) is list:
        return [_unmark(v) for v in value]
    return value


def _strings(value: Any, found: set[str]) -> None:
    """Every string value inside an encoded value (not dict keys), tags' text decoded."""
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is str:
            found.add(v)
        elif type(v) is list:
            stack.extend(v)
        elif type(v) is dict:
            if len(v) == 1:
                (tag, inner), = v.items()
                if tag in ("$bytes", "$badstr") and type(inner) is str:
                    text = _decoded_text(tag, inner)
                    if text is not None:
                        shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
                        found.add(shown)  # as an error text holds it (a lone surrogate as the text \\ud800)
                        if tag == "$badstr" and shown != text:
                            found.add(text)  # as a result or later content holds it (scrub_values_in)
                    continue
                if tag in _TAG_WORDS and type(inner) is dict:
                    # the tag's own words (a $lossy's reason "unsupported", a class name) are no content of
                    # the value: remembered, every later "unsupported" of the run would become a marker
                    stack.extend(x for k, x in inner.items() if k not in _TAG_WORDS[tag])
                    continue
            stack.extend(v.values())


#: The members of the canonical encoder's tags (docs/canonical.md) that describe the value rather than
#: hold it: left out of the strings a redacted value is remembered by (:func:`_strings`).
_TAG_WORDS = {"$lossy": ("reason", "type"), "$pydantic": ("type",), "$dataclass": ("type",), "$enum": ("type",)}


def _decoded_text(tag: str, b64: str) -> str | None:
    """The text inside a ``$bytes`` / ``$badstr`` tag, for pattern matching."""
    import base64

    try:
        raw = base64.b64decode(b64)
    except ValueError:
        return None
    return raw.decode("utf-8", "surrogateescape" if tag == "$bytes" else "surrogatepass")


# Constructs under which "matches inside a string" does not imply "matches inside the canonical text":
# anchors and lookarounds see the quotes; possessive quantifiers and atomic groups (Python 3.11+) cannot
# give back the closing quote they swallowed. A positive lookbehind, (?<=…), is sound: what it saw in a string it sees in
# the text (a lookbehind past the string's start fails in the string).
_ANCHORS = ("$", "\\A", "\\Z", "\\z", "(?<!", "(?=", "(?!", '"', "(?>", "++", "*+", "?+", "}+")


def _quick_ok(policy: ContentPolicy, combined: "re.Pattern[str] | None") -> bool:
    """Whether :meth:`Redactor._clean` is sound for this policy: no paths; keys ASCII;
    patterns without anchors, lookaheads, negative lookbehinds, quotes, possessive quantifiers or atomic groups
    (a match inside a string is then a match inside the canonical text, where strings sit
    verbatim between quotes), and combinable into one regex."""
    if policy.paths or not all(k.isascii() for k in policy.keys):
        return False
    if policy.patterns and combined is None:
        return False
    return not any(a in p for p in policy.patterns for a in _ANCHORS) and not any(
        _CARET.search(p) for p in policy.patterns)


#: The characters other than ``A``-``Z`` whose ``str.lower()`` is one ASCII character: the Kelvin sign.
_FOLDS_TO_ASCII = {"k": "\u212a"}


def _pair_regex(keys: "set[str]", suffixes: "tuple[str, ...]" = ()) -> "re.Pattern[bytes]":
    """A search of canonical text for a list whose first item is a string that :func:`_norm_key`
    makes one of ``keys`` (normalised, ASCII: see :func:`_quick_ok`): ``["Set-Cookie",``, for
    :meth:`Redactor._clean_text`. Every list starting with a string appears as ``["<text>",`` (a
    string holding ``"`` or ``\\`` has a backslash, which both forms of the check decline), and the
    name's characters are the key's, each in either case (``k`` also as the Kelvin sign, which
    ``lower()`` makes ``k``), with any ``-`` and ``_`` between them: so it finds every pair
    :meth:`Redactor._walk` redacts; a match in a longer list only costs the walk. A name ending with one
    of ``suffixes`` (normalised) is found as any text before the suffix's characters."""
    sep = b"[-_]*"
    names = [sep + _names_regex(keys, sep)] if keys else []
    if suffixes:
        names.append(b'[^"]*' + _names_regex(suffixes, sep))
    return re.compile(b'\\["(?:' + b"|".join(names) + b")" + sep + b'",')


#: The members of a dict that name its ``value`` member (``Redactor._names_a_key``), lower-cased.
_NAME_MEMBERS = ("name", "key")


def _names_regex(keys: "Any", sep: bytes) -> bytes:
    """An alternation (bytes regex) of the texts :func:`_norm_key` makes one of ``keys`` (normalised,
    ASCII): each character in either case (``k`` also as the Kelvin sign), ``sep`` between them."""
    names = []
    for key in sorted(keys, key=len, reverse=True):
        parts = []
        for ch in key:
            options = {re.escape(c.encode()) for c in (ch, ch.upper(), _FOLDS_TO_ASCII.get(ch, ch))}
            parts.append(options.pop() if len(options) == 1 else b"(?:" + b"|".join(sorted(options)) + b")")
        names.append(sep.join(parts))
    return b"(?:" + b"|".join(names) + b")"


def _named_regex(keys: "set[str]", suffixes: "tuple[str, ...]" = ()) -> "re.Pattern[bytes]":
    """A search of canonical text for a member ``name`` / ``key`` (lower-cased; ``K`` may be the Kelvin
    sign) whose string :func:`_norm_key` makes one of ``keys``: ``"Key":"api_key"``, for
    :meth:`Redactor._clean_text`. Canonical text writes a member as ``"<key>":"<text>"`` (a string
    holding ``"`` or ``\\`` has a backslash, which both forms of the check decline): so it finds every
    dict :meth:`Redactor._names_a_key` finds."""
    sep = b"[-_]*"
    members = _names_regex(_NAME_MEMBERS, b"")
    names = [sep + _names_regex(keys, sep)] if keys else []
    if suffixes:  # a name ending with one of them: any text before it
        names.append(b'[^"]*' + _names_regex(suffixes, sep))
    return re.compile(b'"' + members + b'":"(?:' + b"|".join(names) + b")" + sep + b'"')
_CARET = re.compile(r"(?<!\[)\^")  # "^" as an anchor (not the "[^" of a negated class)


def _trie(words: "Any") -> str:
    """A regex (source) matching exactly the strings ``words``, as a prefix tree: ``(?:a(?:pikey|uth)|db…)``.
    ``re`` tries the branches of an alternation one by one at each position; with a branch per first
    character (then per next one) a position is rejected after a few tests, not one per word (the key
    marks of :class:`Redactor`, searched on every payload the C scan is not there for)."""
    tree: dict = {}
    for word in words:
        node = tree
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def source(node: dict) -> str:
        branches = [re.escape(ch) + source(child) for ch, child in sorted(node.items()) if ch]
        if "" in node:
            branches.append("")
        if len(branches) == 1:
            return branches[0]
        return "(?:" + "|".join(branches) + ")"

    if not words:
        return "(?!)"
    try:
        return source(tree)
    except RecursionError:  # configured names thousands of characters long: one branch per name
        return "(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + ")"


class _KeyNames(frozenset):
    """The exact sensitive names (normalised), and ``suffixes``: ``name in keys`` is also true of a name
    ending with one of them (``myapppassword`` for the configured ``*password``). Iterating gives the
    exact names only."""

    suffixes: "tuple[str, ...]" = ()

    def __new__(cls, names: "Any", suffixes: "tuple[str, ...]") -> "_KeyNames":
        self = super().__new__(cls, names)
        self.suffixes = tuple(suffixes)
        return self

    def __contains__(self, name: object) -> bool:
        return frozenset.__contains__(self, name) or (type(name) is str and name.endswith(self.suffixes))


def _norm_key(key: str) -> str:
    """A key as compared with the sensitive names: lower case, without ``-`` and ``_``
    (``accessToken``, ``access-token`` and ``ACCESS_TOKEN`` are all ``accesstoken``)."""
    return key.lower().replace("-", "").replace("_", "")


_FOLD_SAFE = frozenset("abcdefghjlmnopqrtuvwxyz")  # no Unicode case variant but their ASCII upper case


def _prefilters(patterns: tuple[str, ...]) -> tuple[tuple[str | None, "re.Pattern[str] | None"], ...]:
    """Cheap supersets of the patterns, for :meth:`Redactor._clean` (only "no match" is relied on).

    A leading ``\\b`` is dropped (it stops ``re`` from scanning for a literal prefix; the pattern
    without it matches wherever the pattern does). A ``(?i)`` pattern that begins with three or more
    letters whose only case variant is their ASCII upper case becomes a substring test of those
    letters on the lower-cased text (case-insensitive ``re`` scans slowly).
    """
    out: list[tuple[str | None, "re.Pattern[str] | None"]] = []
    for pattern in patterns:
        m = _GLOBAL_FLAGS.match(pattern)
        flags, body = (m.group(1), pattern[m.end():]) if m else ("", pattern)
        if body.startswith("\\b"):
            body = body[2:]
        if flags == "i" and ("|" not in body or _leading_literals(body) >= 3):
            n = 0
            while n < len(body) and body[n].lower() in _FOLD_SAFE:
                n += 1
            if "|" in body:
                n = min(n, _leading_literals(body))  # an alternation: only the letters every match begins with
            if n >= 3 and (n == len(body) or body[n] not in "*?{+|"):
                out.append((body[:n].lower(), None))
                continue
        out.append((None, re.compile(f"(?{flags}:{body})" if flags else body)))
    return tuple(out)



def _leading_literals(body: str) -> int:
    """How many single characters every match of ``body`` begins with, as parsed (``abc(?:x|y)``: 3;
    ``abc|abd``: 0); 0 when it cannot be parsed."""
    try:
        from re import _constants as sre
        from re import _parser

        n = 0
        for op, _ in _parser.parse(body):
            if op is not sre.LITERAL:
                break
            n += 1
        return n
    except Exception:  # noqa: BLE001 - an unknown construct: no literal prefilter
        return 0


def _suffix_table(suffixes: "tuple[bytes, ...]") -> bytes:
    """The ``suffixes`` argument of :func:`sealbox._speedups.scan_text` (normalised, 1 to 64 bytes each): the bit set
    (32 bytes) of the bytes they end with, the longest one's length, then each after a byte giving its length;
    ``b""`` for none."""
    if not suffixes:
        return b""
    mask = bytearray(32)
    for suffix in suffixes:
        mask[suffix[-1] >> 3] |= 1 << (suffix[-1] & 7)
    return bytes(mask) + bytes([max(map(len, suffixes))]) + b"".join(bytes([len(k)]) + k for k in suffixes)


#: The needles :func:`sealbox._speedups.scan_text` looks for in one call (its masks: two 64-bit words).
_SCAN_NEEDLES = 128


def _scan_tables(needles: tuple[bytes, ...], folded: int) -> bytes:
    """The lookup tables of :func:`sealbox._speedups.scan_text` (at most :data:`_SCAN_NEEDLES` needles): for each
    byte value the mask of the needles whose first byte it is, the same for the second byte (both cases of a letter
    where the needle's bit is set in ``folded``), then ``folded`` (its first 128 bits); each mask as two native-endian
    uint64, bits 0-63 then 64-127: 1026 uint64."""
    first, second = [0] * 256, [0] * 256
    for j, needle in enumerate(needles):
        for table, byte in ((first, needle[0]), (second, needle[1])):
            table[byte] |= 1 << j
            if folded >> j & 1 and 0x61 <= byte <= 0x7A:
                table[byte - 0x20] |= 1 << j
    low = (1 << 64) - 1
    words = [w for m in (*first, *second, folded) for w in (m & low, m >> 64 & low)]
    return struct.pack("=1026Q", *words)


def _required_literals(pattern: str) -> tuple[tuple[bytes, bool], ...] | None:
    """Strings one of which every match of ``pattern`` contains, for :func:`sealbox._speedups.scan_text`:
    ``((utf8, folded), ...)`` where ``folded`` means "ASCII letters in either case" (the bytes given in
    lower case), or None when none of at least two bytes is found.

    Read from the parsed pattern (``re._parser``, CPython's own): a run of literal characters in
    the top-level sequence, or inside a group, or a repeat of at least one, or every branch of an
    alternation. Under IGNORECASE only characters whose one case variant is their ASCII other case
    are kept (``k``, ``s`` and ``i`` also match U+212A, U+017F and U+0130): the search stays sound.
    """
    try:
        from re import _constants as sre
        from re import _parser

        parsed = _parser.parse(pattern)
        ignorecase = bool(parsed.state.flags & re.IGNORECASE)
        return _best(_candidates(list(parsed), ignorecase, sre, 0))
    except Exception:  # noqa: BLE001 - an unknown construct: no prefilter, the regex always runs
        return None


def _text_gate(pattern: str) -> tuple[tuple[str, bool], ...] | None:
    """:func:`_required_literals` of ``pattern`` as strings, for :meth:`Redactor._scrub`:
    ``((text, folded), ...)``, ``folded`` meaning "look in the lower-cased text" (the text given
    in lower case, ASCII); None when no such string is known (the regex always runs)."""
    required = _required_literals(pattern)
    if required is None:
        return None
    try:
        return tuple((literal.decode("utf-8", "surrogatepass"), folded) for literal, folded in required)
    except UnicodeDecodeError:
        return None


def _candidates(items: list, ignorecase: bool, sre: Any, depth: int) -> list[tuple[tuple[bytes, bool], ...]]:
    """Each a set of alternatives one of which every match of the sequence ``items`` contains."""
    if depth > 20:
        return []
    out: list[tuple[tuple[bytes, bool], ...]] = []
    run: list[str] = []

    def close() -> None:
        if len(run) >= 2:
            text = "".join(run)
            out.append(((text.lower().encode() if ignorecase else text.encode("utf-8", "surrogatepass"), ignorecase),))
        run.clear()

    for op, arg in items:
        if op is sre.LITERAL:
            ch = chr(arg)
            if ignorecase and not (ch.isascii() and (not ch.isalpha() or ch.lower() in _FOLD_SAFE)):
                close()
                continue
            run.append(ch)
            continue
        close()
        if op is sre.SUBPATTERN:
            _group, add_flags, del_flags, sub = arg
            inner = (ignorecase or bool(add_flags & re.IGNORECASE)) and not del_flags & re.IGNORECASE
            out.extend(_candidates(list(sub), inner, sre, depth + 1))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and arg[0] >= 1:
            out.extend(_candidates(list(arg[2]), ignorecase, sre, depth + 1))
        elif op is sre.BRANCH:
            alternatives: list[tuple[bytes, bool]] = []
            for branch in arg[1]:
                best = _best(_candidates(list(branch), ignorecase, sre, depth + 1))
                if best is None:
                    alternatives = []
                    break
                # once each (A(?:ccess|uth)Token|S(?:ession|lack)Token: Token, not one per branch)
                alternatives.extend(b for b in best if b not in alternatives)
            # one holding another of them is implied by it (AccessToken|Token: Token alone; an ASCII-folded one only
            # by another folded one): a needle and a substring test fewer
            alternatives = [a for a in alternatives
                            if not any(b != a and b[0] in a[0] and (b[1] or not a[1]) for b in alternatives)]
            if alternatives:
                out.append(tuple(alternatives))
    close()
    return out


def _best(candidates: list[tuple[tuple[bytes, bool], ...]]) -> tuple[tuple[bytes, bool], ...] | None:
    """The candidate whose shortest alternative is longest (fewest chance hits), at most 8 alternatives."""
    usable = [c for c in candidates if 0 < len(c) <= 8 and all(len(b) >= 2 for b, _ in c)]
    return max(usable, key=lambda c: (min(len(b) for b, _ in c), -len(c)), default=None)

_GLOBAL_FLAGS = re.compile(r"^\(\?([imsx]+)\)")
#: A group referred to by number (``\1``, ``(?(1)...)``): such a pattern is never joined with others,
#: whose groups would shift its numbers (a false positive, ``\\1``, only costs a separate search).
_NUMBERED_REF = re.compile(r"\\[1-9]|\(\?\(\d")


def _compile_any(patterns: list[str]) -> tuple["re.Pattern[str]", ...]:
    """Regexes that together match wherever any of ``patterns`` (each compilable alone, flags
    scoped) matches: one alternation (one search instead of one per pattern), or each on its own
    where they cannot be joined (e.g. two patterns naming the same group)."""
    if not patterns:
        return ()
    if any(_NUMBERED_REF.search(p) for p in patterns):
        return tuple(re.compile(p) for p in patterns)
    try:
        return (re.compile("|".join(f"(?:{p})" for p in patterns)),)
    except re.error:
        return tuple(re.compile(p) for p in patterns)


def _combined(patterns: tuple[str, ...]) -> "re.Pattern[str] | None":
    """One regex matching wherever any pattern matches (leading ``(?i)`` made scoped), or None."""
    if not patterns or any(_NUMBERED_REF.search(p) for p in patterns):
        return None  # joined, a pattern's \1 or (?(1)...) would name another pattern's group
    parts = []
    for p in patterns:
        m = _GLOBAL_FLAGS.match(p)
        parts.append(f"(?{m.group(1)}:{p[m.end():]})" if m else f"(?:{p})")
    try:
        return re.compile("|".join(parts))
    except re.error:  # flags that cannot be scoped: fall back to one search per pattern
        return None


#: A redaction marker inside a string, as :class:`Redactor` writes it.
_IN_STRING_MARKER = re.compile("\u27e6redacted:hmac-sha256:[0-9a-f]{64}\u27e7")
_IN_BYTES_MARKER = re.compile(_IN_STRING_MARKER.pattern.encode("utf-8"))
_MARKER_DIGEST = re.compile("hmac-sha256:[0-9a-f]{64}")


def holds_marker(value: Any) -> bool:
    """Whether a recorded (encoded, blobs resolved) value holds a redaction marker as the store writes
    them (:mod:`sealbox.redaction`): a whole value ``{"$redacted": "hmac-sha256:<64 hex>"}``, or
    ``⟦redacted:hmac-sha256:<64 hex>⟧`` inside a string, a dict key or the bytes of a ``$bytes`` /
    ``$badstr`` tag. A tool's own text that merely quotes ``$redacted`` or ``⟦redacted:``, or a
    tool's own dict keyed ``$redacted`` (stored escaped, ``{"$esc": {...}}``), is not one.

    Used wherever a record must be told from what the tool answered: replay (a step whose recorded
    result or response holds one is unreplayable, :mod:`sealbox.replay.keys`) and the gateway (a
    result another gateway process recorded is not served with one)."""
    import base64

    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str:
            if _IN_STRING_MARKER.search(v):
                return True
        elif t is list:
            stack.extend(v)
        elif t is dict:
            if len(v) == 1:
                (tag, inner), = v.items()
                if tag == MARKER_TAG:  # a tag, never a user's key (those are inside $esc)
                    if type(inner) is str and _MARKER_DIGEST.fullmatch(inner):
                        return True
                    continue
                if tag in ("$bytes", "$badstr") and type(inner) is str:
                    try:
                        if _IN_BYTES_MARKER.search(base64.b64decode(inner, validate=True)):
                            return True
                    except ValueError:
                        pass
                    continue
                if tag == "$esc" and type(inner) is dict:  # a user's dict whose keys start with "$"
                    v = inner
            for k, x in v.items():
                if type(k) is str and _IN_STRING_MARKER.search(k):
                    return True
                stack.append(x)
    return False


class _PlanBuilder:
    """What :meth:`Redactor._compile` sets its searches on: a policy, no secret."""

    def __init__(self, policy: ContentPolicy) -> None:
        self.policy = policy
        self._compile()

    _compile = Redactor._compile
    _scan_plan = Redactor._scan_plan
