"""A blob's salt is HMAC-SHA256(store secret, content) (sealbox.blobs.salt_for): the one-shot
``hmac.digest`` it uses gives the same bytes as the ``hmac.new`` object it replaced, and as the
RFC 4231 vectors, so blobs written before and after commit to the same refs."""

import hashlib
import hmac

from sealbox import blobs


def test_salt_is_rfc4231_hmac_sha256():
    # RFC 4231 §4.3 (test case 2) and §4.7 (test case 6: a key longer than the block)
    assert blobs.salt_for(b"Jefe", b"what do ya want for nothing?").hex() == (
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    assert blobs.salt_for(b"\xaa" * 131, b"Test Using Larger Than Block-Size Key - Hash Key First").hex() == (
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")


def test_salt_equals_the_hmac_object_for_any_content():
    secret = bytes(range(32))
    for content in (b"", b"{}", b'{"i":1,"q":"select * from t"}', b"x" * 63, b"x" * 64, b"\x00\xff" * 5000):
        assert blobs.salt_for(secret, content) == hmac.new(secret, content, hashlib.sha256).digest()
        assert blobs.salt_for(bytearray(secret), bytearray(content)) == blobs.salt_for(secret, content)
