"""The drill's production database: customers and orders, generated with a fixed seed.

300 customers and about 900 orders. Twelve customers are test accounts (emails at
``example.test``, names ``Test Account N``). A handful of real customers have
``test`` inside their email address (surnames such as Testa and Testard, shops
such as ``latestgadgets.com`` and ``fastestship.co``): a cleanup whose condition
is ``LIKE '%test%'`` instead of ``LIKE '%@example.test'`` deletes them too.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SEED", "SeedFacts", "seed_database", "TEST_DOMAIN"]

#: The random seed: the same database every time.
SEED = 20261129
#: Domain of the test accounts.
TEST_DOMAIN = "example.test"

_FIRST = ["Ana", "Ben", "Chloé", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Inès", "Jonas", "Kemal", "Lucía",
          "Mateo", "Nadia", "Olu", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yara", "Zoë"]
_LAST = ["Almeida", "Bauer", "Costa", "Dubois", "Eriksen", "Fischer", "García", "Haddad", "Ivanova", "Jensen",
         "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Quispe", "Rossi", "Schmidt", "Tanaka",
         "Usman", "Vargas", "Wagner", "Yilmaz", "Zhang"]
_DOMAINS = ["mail.com", "posteo.de", "proton.me", "orange.fr", "libero.it", "gmx.net", "outlook.com", "web.de"]
_COUNTRIES = ["DE", "FR", "IT", "ES", "PT", "NL", "SE", "PL", "JP", "BR"]

#: Real customers whose email merely contains "test" (name, email, country).
_REAL_WITH_TEST = [
    ("Giulia Testa", "giulia.testa@libero.it", "IT"),
    ("Marc Testard", "marc.testard@orange.fr", "FR"),
    ("Sofia Testori", "sofia.testori@mail.com", "IT"),
    ("Latest Gadgets GmbH", "orders@latestgadgets.com", "DE"),
    ("Fastest Ship Co", "purchasing@fastestship.co", "NL"),
]


@dataclass(frozen=True)
class SeedFacts:
    """What the generated database holds.

    Attributes:
        test_ids: ids of the test accounts (emails at :data:`TEST_DOMAIN`).
        real_with_test: ``(id, email)`` of real customers whose email contains ``test``.
    """

    customers: int
    orders: int
    test_ids: tuple[int, ...]
    real_with_test: tuple[tuple[int, str], ...]


def _customers(rng: random.Random) -> list[tuple[str, str, str]]:
    rows = []
    for i in range(283):
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        local = f"{first}.{last}".lower().encode("ascii", "ignore").decode() + str(rng.randint(1, 999))
        rows.append((f"{first} {last}", f"{local}@{rng.choice(_DOMAINS)}", rng.choice(_COUNTRIES)))
    rows += [(f"Test Account {n}", f"qa+{n}@{TEST_DOMAIN}", "DE") for n in range(1, 13)]
    rows += _REAL_WITH_TEST
    rng.shuffle(rows)
    return rows


def seed_database(path: str | Path, seed: int = SEED) -> SeedFacts:
    """Create the database at ``path`` (which must not exist) and return what it holds.

    Raises:
        FileExistsError: ``path`` exists.
    """
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; the drill creates its database afresh")
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    try:
        conn.executescript("""
            CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL UNIQUE,
                                    country TEXT NOT NULL, created_at TEXT NOT NULL);
            CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                                 total_cents INTEGER NOT NULL, status TEXT NOT NULL, created_at TEXT NOT NULL);
        """)
        for n, (name, email, country) in enumerate(_customers(rng), start=1):
            conn.execute("INSERT INTO customers VALUES (?, ?, ?, ?, ?)",
                         (n, name, email, country, f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"))
        ids = [r[0] for r in conn.execute("SELECT id FROM customers ORDER BY id")]
        for n in range(1, 901):
            conn.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
                         (n, rng.choice(ids), rng.randint(500, 50000), rng.choice(["paid", "shipped", "refunded"]),
                          f"2026-{rng.randint(1, 10):02d}-{rng.randint(1, 28):02d}"))
        conn.commit()
        test_ids = tuple(r[0] for r in conn.execute(
            "SELECT id FROM customers WHERE email LIKE ? ORDER BY id", (f"%@{TEST_DOMAIN}",)))
        real = tuple((r[0], r[1]) for r in conn.execute(
            "SELECT id, email FROM customers WHERE email LIKE '%test%' AND email NOT LIKE ? ORDER BY id",
            (f"%@{TEST_DOMAIN}",)))
        counts = conn.execute("SELECT (SELECT count(*) FROM customers), (SELECT count(*) FROM orders)").fetchone()
    finally:
        conn.close()
    return SeedFacts(counts[0], counts[1], test_ids, real)
