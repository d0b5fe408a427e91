"""An approval id given without its `apr_` tag."""

from __future__ import annotations

from test_id_prefixes import sample, sb  # noqa: F401  (the module's store with two approval requests)


def test_an_approval_id_without_its_apr_tag_names_the_request(sample) -> None:
    """`approvals show fcb68f27` (the id's hex, copied without `apr_`) said "no approval request
    'fcb68f27' in this store" although exactly one request's id is apr_fcb68f27…."""
    path, (first, second), key = sample
    n = next(i for i in range(4, len(first)) if first[:i] != second[:i])
    hex_only = first[4:max(n, 8) + 1]
    shown = sb("approvals", "show", hex_only, "-s", path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == f"approval   {first}"
    res = sb("approvals", "show", first[4:7], "-s", path)  # 3 characters: too short, as with apr_
    assert (res.returncode, res.stderr) == (
        2, f"error: no approval {first[4:7]!r}; an id prefix needs at least 4 characters\n")
