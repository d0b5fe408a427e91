/*
 * sealbox._speedups: the plain-I-JSON copy of sealbox.canonical in C, and the redactor's text scan.
 *
 * copy_plain(value, limit) -> (copy, floats)
 *
 * The same answer as sealbox.canonical._copy_plain(value, 0, limit, seen), which stays the
 * reference (a property test checks the two agree on generated values): a fresh copy of
 * ``value`` when it is plain I-JSON -- exactly ``dict`` (ASCII ``str`` keys, none holding
 * ``$``), ``list``, ``tuple`` (made a list), ``str`` without surrogate code points, ``int``
 * within +-(2**53 - 1), finite ``float``, ``bool`` and ``None``, nested within ``limit``
 * containers -- and whether a float was met. Strings, numbers, booleans and None are shared
 * with ``value`` (immutable); every dict and list is new. Anything else (a subclass, an enum
 * member, a tag-like key, a cycle or nesting past ``limit``, a container changed while it was
 * copied) raises NotPlain, and the caller leaves the whole value to the Python encoder.
 *
 * Built by setup.py as an optional extension: without a C compiler the package installs
 * and runs on the Python reference alone (sealbox.canonical.SPEEDUPS says which is used).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#define INT_LIMIT 9007199254740991LL /* 2**53 - 1: I-JSON, RFC 7493 section 2.2 */

static PyObject *NotPlain; /* sealbox._speedups.NotPlain */

static int
not_plain(void)
{
    PyErr_SetNone(NotPlain);
    return -1;
}

/* 1: no surrogate code point (str.encode("utf-8") succeeds); 0: one is there. */
static int
valid_unicode(PyObject *s)
{
    if (PyUnicode_IS_ASCII(s)) {
        return 1;
    }
    int kind = PyUnicode_KIND(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        return 1;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const void *data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0xD800 && c <= 0xDFFF) {
            return 0;
        }
    }
    return 1;
}

/* A key the plain path accepts: exactly str, ASCII, without '$'. */
static int
plain_key(PyObject *k)
{
    if (Py_TYPE(k) != &PyUnicode_Type || !PyUnicode_IS_ASCII(k)) {
        return 0;
    }
    return memchr(PyUnicode_1BYTE_DATA(k), '$', (size_t)PyUnicode_GET_LENGTH(k)) == NULL;
}

static PyObject *copy(PyObject *v, int level, int limit, int *floats);

/* A dict's copy; ``level`` counts the containers around its values (this one included). */
static PyObject *
copy_dict(PyObject *v, int level, int limit, int *floats)
{
    Py_ssize_t size = PyDict_GET_SIZE(v);
    PyObject *out = PyDict_New();
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *x;
    while (PyDict_Next(v, &pos, &k, &x)) {
        if (!plain_key(k)) {
            not_plain();
            goto fail;
        }
        Py_INCREF(k);
        Py_INCREF(x);
        PyObject *c;
        if (Py_TYPE(x) == &PyUnicode_Type && PyUnicode_IS_ASCII(x)) {
            c = Py_NewRef(x);
        }
        else {
            c = copy(x, level, limit, floats);
        }
        int rc = c == NULL ? -1 : PyDict_SetItem(out, k, c);
        Py_XDECREF(c);
        Py_DECREF(x);
        Py_DECREF(k);
        if (rc < 0) {
            goto fail;
        }
    }
    /* Changed meanwhile (a finalizer run by a collection, another thread): the Python
       reference raises "changed size during iteration" there, and the encoder decides. */
    if (PyDict_GET_SIZE(v) != size || PyDict_GET_SIZE(out) != size) {
        not_plain();
        goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
copy_sequence(PyObject *v, int is_list, int level, int limit, int *floats)
{
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < (is_list ? PyList_GET_SIZE(v) : PyTuple_GET_SIZE(v)); i++) {
        PyObject *x = is_list ? PyList_GET_ITEM(v, i) : PyTuple_GET_ITEM(v, i);
        Py_INCREF(x);
        PyObject *c;
        if (Py_TYPE(x) == &PyUnicode_Type && PyUnicode_IS_ASCII(x)) {
            c = Py_NewRef(x);
        }
        else {
            c = copy(x, level, limit, floats);
        }
        int rc = c == NULL ? -1 : PyList_Append(out, c);
        Py_XDECREF(c);
        Py_DECREF(x);
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *
copy(PyObject *v, int level, int limit, int *floats)
{
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type) {
        if (valid_unicode(v)) {
            return Py_NewRef(v);
        }
        not_plain();
        return NULL;
    }
    if (t == &PyLong_Type) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (overflow == 0 && x >= -INT_LIMIT && x <= INT_LIMIT) {
            return Py_NewRef(v);
        }
        not_plain();
        return NULL;
    }
    if (t == &PyDict_Type || t == &PyList_Type || t == &PyTuple_Type) {
        if (level + 3 > limit) {
            not_plain();
            return NULL;
        }
        /* limit may be up to 100000 (deeper than the C stack): the reference raises RecursionError
           there, and so does this copy instead of overflowing the stack */
        if (Py_EnterRecursiveCall(" while copying a value (sealbox._speedups)")) {
            return NULL;
        }
        PyObject *out = t == &PyDict_Type ? copy_dict(v, level + 1, limit, floats)
                                          : copy_sequence(v, t == &PyList_Type, level + 1, limit, floats);
        Py_LeaveRecursiveCall();
        return out;
    }
    if (v == Py_None || t == &PyBool_Type) {
        return Py_NewRef(v);
    }
    if (t == &PyFloat_Type) {
        if (isfinite(PyFloat_AS_DOUBLE(v))) {
            *floats = 1;
            return Py_NewRef(v);
        }
    }
    not_plain();
    return NULL;
}

static PyObject *
copy_plain(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "copy_plain(value, limit) takes exactly 2 arguments");
        return NULL;
    }
    long limit = PyLong_AsLong(args[1]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (limit < 0 || limit > 100000) {
        PyErr_SetString(PyExc_ValueError, "copy_plain: limit must be between 0 and 100000");
        return NULL;
    }
    int floats = 0;
    PyObject *out = copy(args[0], 0, (int)limit, &floats);
    if (out == NULL) {
        return NULL;
    }
    return Py_BuildValue("(NO)", out, floats ? Py_True : Py_False);
}


/*
 * scan_text(data, needles, tables, keys[, keys_sorted[, suffixes]]) -> int
 *
 * One pass over ``data`` (a redactor's canonical JSON text, sealbox.redaction.Redactor._clean):
 *
 * - keys: every ``"name":`` in the text (the string before a ``":``; with no backslash in the
 *   text, quotes alternate open/close), and every ``["name",`` (a list's first item, a string,
 *   followed by another: a [name, value] pair, sealbox.redaction.Redactor._walk) is normalised as sealbox.redaction._norm_key does for ASCII
 *   (lower case, ``-`` and ``_`` dropped) and compared with ``keys`` (a tuple of bytes, already
 *   normalised; looked up by bisection when ``keys_sorted`` is true: the caller's word that they are sorted
 *   by length, then bytes, as the redactor sorts them; else one by one); so is the string value of a member named ``name`` or ``key`` (normalised: ``{"name":
 *   "Authorization","value":...}``, whose ``value`` the walk redacts, Redactor._names_a_key). A match, or a name holding a byte >= 0x80 (whose Unicode lower case could be
 *   ASCII: U+212A KELVIN SIGN is ``k``), returns -1.
 *   suffixes (bytes, sealbox.redaction._suffix_table of the normalised suffixes, 1 to 64 bytes each): a name (as above) whose normalised form ends with
 *   one of them returns -1 too (``MY_APP_PASSWORD`` for ``password``: the redactor's suffix keys, ``*password``).
 * - needles (a tuple of at most 128 (SCAN_WORDS * 64) bytes objects, each at least 2 bytes): otherwise the result
 *   has bit i set when needles[i] occurs in ``data``.
 * - tables (bytes, from sealbox.redaction._scan_tables): for each byte value, the mask of the needles whose first
 *   byte it is (SCAN_WORDS native uint64, bit i of the mask in word i / 64), the same for the second byte, then the
 *   mask of the needles that match ASCII letters in either case (given in lower case; their masks hold both cases):
 *   (256 + 256 + 1) * SCAN_WORDS uint64.
 *
 * A backslash anywhere in ``data`` returns -1 at once: with escapes, quotes no longer alternate
 * open/close and the key scan would not be sound. The caller relies only on "no key and no
 * needle", i.e. a result of 0.
 */
#define SCAN_WORDS 2 /* the masks' 64-bit words: at most 128 needles per call */
#define SCAN_NEEDLES (SCAN_WORDS * 64)

/* the index of m's lowest set bit (m != 0) */
static inline int
lowest_bit(unsigned long long m)
{
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_ctzll(m);
#else
    int bit = 0;
    while (!(m & 1ULL)) {
        m >>= 1;
        bit++;
    }
    return bit;
#endif
}

static inline unsigned long long
load_u64(const char *p)
{
    unsigned long long v;
    memcpy(&v, p, sizeof v); /* one load: the bytes object's buffer need not be aligned */
    return v;
}

/* The order of keys_sorted: the shorter first, then bytes order (Python's sorted(keys, key=lambda k: (len(k), k))):
 * a name is told from most keys by its length alone. */
static inline int
compare_key(const unsigned char *a, Py_ssize_t alen, const unsigned char *b, Py_ssize_t blen)
{
    if (alen != blen) {
        return alen < blen ? -1 : 1;
    }
    return memcmp(a, b, (size_t)alen);
}

static PyObject *
scan_text(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 4 || nargs > 6 || !PyBytes_Check(args[0]) || !PyTuple_Check(args[1]) || !PyBytes_Check(args[2])
        || !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "scan_text(data: bytes, needles: tuple, tables: bytes, keys: tuple[, keys_sorted[, suffixes]])");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t nneedles = PyTuple_GET_SIZE(args[1]);
    Py_ssize_t nkeys = PyTuple_GET_SIZE(args[3]);
    if (nneedles > SCAN_NEEDLES || PyBytes_GET_SIZE(args[2]) != 513 * SCAN_WORDS * 8) {
        PyErr_SetString(PyExc_ValueError, "scan_text: at most 128 needles, tables of 1026 uint64");
        return NULL;
    }
    const char *first = PyBytes_AS_STRING(args[2]), *second = first + 256 * SCAN_WORDS * 8;
    unsigned long long folded[SCAN_WORDS];
    for (int w = 0; w < SCAN_WORDS; w++) {
        folded[w] = load_u64(first + (512 * SCAN_WORDS + w) * 8);
    }
    const unsigned char *ndata[SCAN_NEEDLES];
    Py_ssize_t nlen[SCAN_NEEDLES];
    for (Py_ssize_t j = 0; j < nneedles; j++) {
        PyObject *needle = PyTuple_GET_ITEM(args[1], j);
        if (!PyBytes_Check(needle) || PyBytes_GET_SIZE(needle) < 2) {
            PyErr_SetString(PyExc_TypeError, "scan_text: needles must be bytes of at least 2 bytes");
            return NULL;
        }
        ndata[j] = (const unsigned char *)PyBytes_AS_STRING(needle);
        nlen[j] = PyBytes_GET_SIZE(needle);
    }
    Py_ssize_t maxkey = 4; /* at least "name": a member named "name" / "key" is always recognised */
    /* keys_sorted: the caller's word that keys are sorted by length, then bytes (compare_key; the redactor sorts
     * them once): looked up by bisection, else one by one */
    int sorted = 0;
    if (nargs >= 5) {
        sorted = PyObject_IsTrue(args[4]);
        if (sorted < 0) {
            return NULL;
        }
    }
    /* suffixes (bytes, sealbox.redaction._suffix_table: 32 bytes, the bit set of the bytes the suffixes end with; a
     * byte, the longest suffix's length; then each suffix after a byte giving its length, 1 to 64): a name whose
     * normalised form ends with one is a key too; only its last maxsuffix normalised bytes are compared, read
     * backwards from its closing quote. Read as given on every call (the redactor passes the same object each
     * time); an entry's length is checked where it is read */
    const unsigned char *sfx = NULL, *lastbyte = NULL;
    Py_ssize_t sfxlen = 0, maxsuffix = 0;
    int nsuffixes = 0;
    if (nargs == 6) {
        if (!PyBytes_Check(args[5])) {
            PyErr_SetString(PyExc_TypeError, "scan_text: suffixes must be bytes (sealbox.redaction._suffix_table)");
            return NULL;
        }
        Py_ssize_t size = PyBytes_GET_SIZE(args[5]);
        const unsigned char *table = (const unsigned char *)PyBytes_AS_STRING(args[5]);
        if (size > 33) {
            lastbyte = table;
            maxsuffix = table[32];
            sfx = table + 33;
            sfxlen = size - 33;
            nsuffixes = 1;
            if (maxsuffix < 1 || maxsuffix > 64) {
                PyErr_SetString(PyExc_ValueError, "scan_text: suffixes: the longest must be 1 to 64 bytes");
                return NULL;
            }
        }
        else if (size != 0) {
            PyErr_SetString(PyExc_ValueError, "scan_text: suffixes: a table of 33 bytes, then the suffixes");
            return NULL;
        }
    }
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        PyObject *key = PyTuple_GET_ITEM(args[3], k);
        if (!PyBytes_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "scan_text: keys must be bytes");
            return NULL;
        }
        if (PyBytes_GET_SIZE(key) > maxkey) {
            maxkey = PyBytes_GET_SIZE(key);
        }
    }
    if (memchr(data, '\\', (size_t)n) != NULL) {
        return PyLong_FromLong(-1); /* escapes: the key scan below would not be sound */
    }
    unsigned long long found[SCAN_WORDS], remaining[SCAN_WORDS];
    for (int w = 0; w < SCAN_WORDS; w++) {
        Py_ssize_t left = nneedles - 64 * w; /* the needles of word w */
        found[w] = 0;
        remaining[w] = left >= 64 ? ~0ULL : left <= 0 ? 0 : ((1ULL << left) - 1);
    }
    Py_ssize_t quote = -1; /* the last quote seen */
    int named = 0; /* the last key was "name" or "key" (normalised): the string right after its colon may name a key */
    int closing = 0; /* the next quote closes a string (no backslash: quotes alternate) */
    unsigned char norm[256];
    for (Py_ssize_t i = 0; i + 1 < n; i++) {
        unsigned char c = data[i];
        if (c == '"') {
            /* a key ("name":), or a list's first item followed by another (["name",): a [name, value]
             * pair, whose value the walk redacts when the name is a key's */
            int is_key = data[i + 1] == ':';
            if ((nkeys || nsuffixes) && quote >= 0 && (is_key || (data[i + 1] == ',' && quote > 0 && data[quote - 1] == '[')
                                        || (closing && named && quote > 0 && data[quote - 1] == ':'))) {
                Py_ssize_t len = 0;
                int too_long = 0;
                for (Py_ssize_t p = quote + 1; p < i; p++) {
                    unsigned char k = data[p];
                    if (k >= 0x80) {
                        return PyLong_FromLong(-1);
                    }
                    if (k == '-' || k == '_') {
                        continue;
                    }
                    if (len >= maxkey) {
                        too_long = 1; /* longer than every key: no match */
                        continue; /* keep looking for a byte >= 0x80 */
                    }
                    if (len >= (Py_ssize_t)sizeof norm) {
                        return PyLong_FromLong(-1); /* a configured key this long: not decided here */
                    }
                    norm[len++] = (k >= 'A' && k <= 'Z') ? (unsigned char)(k - 'A' + 'a') : k;
                }
                if (nsuffixes) {
                    /* the name's last normalised bytes, backwards (tail[0] is its last byte); every byte is ASCII here */
                    unsigned char tail[64];
                    Py_ssize_t tlen = 0;
                    for (Py_ssize_t p = i - 1; p > quote && tlen < maxsuffix; p--) {
                        unsigned char k = data[p];
                        if (k == '-' || k == '_') {
                            continue;
                        }
                        tail[tlen++] = (k >= 'A' && k <= 'Z') ? (unsigned char)(k - 'A' + 'a') : k;
                        if (tlen == 1 && !((lastbyte[tail[0] >> 3] >> (tail[0] & 7)) & 1)) {
                            tlen = 0; /* its last byte ends no suffix */
                            break;
                        }
                    }
                    for (Py_ssize_t p = 0; tlen && p < sfxlen; p += 1 + sfx[p]) {
                        Py_ssize_t slen = sfx[p];
                        const unsigned char *sd = sfx + p + 1;
                        if (slen < 1 || slen > maxsuffix || p + 1 + slen > sfxlen) {
                            PyErr_SetString(PyExc_ValueError, "scan_text: suffixes: an entry of 1 to the longest's bytes, within the table");
                            return NULL;
                        }
                        if (slen > tlen) {
                            continue;
                        }
                        Py_ssize_t q = 0;
                        while (q < slen && sd[slen - 1 - q] == tail[q]) {
                            q++;
                        }
                        if (q == slen) {
                            return PyLong_FromLong(-1);
                        }
                    }
                }
                if (is_key && closing) {
                    named = !too_long && ((len == 4 && memcmp(norm, "name", 4) == 0) || (len == 3 && memcmp(norm, "key", 3) == 0));
                }
                if (!too_long && sorted) {
                    Py_ssize_t lo = 0, hi = nkeys;
                    while (lo < hi) {
                        Py_ssize_t mid = lo + (hi - lo) / 2;
                        PyObject *key = PyTuple_GET_ITEM(args[3], mid);
                        int c = compare_key((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), norm, len);
                        if (c == 0) {
                            return PyLong_FromLong(-1);
                        }
                        if (c < 0) {
                            lo = mid + 1;
                        } else {
                            hi = mid;
                        }
                    }
                } else if (!too_long) {
                    for (Py_ssize_t k = 0; k < nkeys; k++) {
                        PyObject *key = PyTuple_GET_ITEM(args[3], k);
                        if (PyBytes_GET_SIZE(key) == len && memcmp(PyBytes_AS_STRING(key), norm, (size_t)len) == 0) {
                            return PyLong_FromLong(-1);
                        }
                    }
                }
            }
            quote = i;
            closing = !closing;
        }
        /* the needles starting with c (word 0, and word 1 when more than 64 are looked for), then with c, data[i + 1] */
        const char *fc = first + SCAN_WORDS * 8 * c;
        unsigned long long m0 = load_u64(fc) & remaining[0], m1 = load_u64(fc + 8) & remaining[1];
        if ((m0 | m1) == 0) {
            continue;
        }
        const char *sc = second + SCAN_WORDS * 8 * data[i + 1];
        m0 &= load_u64(sc);
        m1 &= load_u64(sc + 8);
        for (int w = 0; w < SCAN_WORDS; w++) {
            unsigned long long m = w ? m1 : m0;
            while (m) {
                int bit = lowest_bit(m);
                m &= m - 1;
                int j = 64 * w + bit;
                Py_ssize_t len = nlen[j];
                if (len > n - i) {
                    continue;
                }
                const unsigned char *nd = ndata[j];
                int match = 1;
                if ((folded[w] >> bit) & 1ULL) {
                    for (Py_ssize_t q = 2; q < len; q++) {
                        unsigned char d = data[i + q];
                        if (d >= 'A' && d <= 'Z') {
                            d = (unsigned char)(d - 'A' + 'a');
                        }
                        if (d != nd[q]) {
                            match = 0;
                            break;
                        }
                    }
                }
                else {
                    match = memcmp(data + i + 2, nd + 2, (size_t)(len - 2)) == 0;
                }
                if (match) {
                    found[w] |= 1ULL << bit;
                    remaining[w] &= ~(1ULL << bit);
                }
            }
        }
    }
    if (found[1] == 0) {
        return PyLong_FromUnsignedLongLong(found[0]);
    }
    /* found[1] << 64 | found[0] */
    PyObject *hi = PyLong_FromUnsignedLongLong(found[1]), *lo = NULL, *shift = NULL, *shifted = NULL, *out = NULL;
    if (hi != NULL && (lo = PyLong_FromUnsignedLongLong(found[0])) != NULL && (shift = PyLong_FromLong(64)) != NULL
        && (shifted = PyNumber_Lshift(hi, shift)) != NULL) {
        out = PyNumber_Or(shifted, lo);
    }
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(shift);
    Py_XDECREF(shifted);
    return out;
}

static PyMethodDef methods[] = {
    {"copy_plain", (PyCFunction)(void (*)(void))copy_plain, METH_FASTCALL,
     "copy_plain(value, limit) -> (copy, floats): sealbox.canonical._copy_plain(value, 0, limit, seen) in C.\n\n"
     "Raises NotPlain where the Python reference raises _NotPlain."},
    {"scan_text", (PyCFunction)(void (*)(void))scan_text, METH_FASTCALL,
     "scan_text(data, needles, tables, keys[, keys_sorted[, suffixes]]) -> int: -1 when the text holds a backslash, or a \"key\": or [\"key\", or a\n"
     "\"name\":\"key\" / \"key\":\"key\" member that\n"
     "normalises to one of keys or ends with one of suffixes (or holds a non-ASCII byte), else the bit mask of the needles found (sealbox.redaction)."},
    {NULL, NULL, 0, NULL},
};

static int
exec_module(PyObject *module)
{
    NotPlain = PyErr_NewExceptionWithDoc("sealbox._speedups.NotPlain",
                                         "The value is not plain I-JSON: the Python encoder decides.",
                                         PyExc_ValueError, NULL);
    if (NotPlain == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "NotPlain", NotPlain) < 0) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "sealbox._speedups",
    "The plain-I-JSON copy of sealbox.canonical in C (optional; the Python reference is used without it).",
    0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&moduledef);
}
