"""A module in the style of Debian's security backports, and its fix, shared by the tests of
patches upstream absorbed (``test_absorbed.py``: from the target's content; ``test_history.py``:
from upstream's history)."""

HEADERS = '''\
"""Parse HTTP-ish headers."""

MAX = 64


def parse_header(data):
    name, _, value = data.partition(b":")
    name = name.strip()
    value = value.strip()
    return name, value


def parse_all(lines):
    return [parse_header(line) for line in lines]


def names(lines):
    return [name for name, _ in parse_all(lines)]
'''
NAME_CHECK = '    if len(name) > MAX:\n        raise ValueError("header name too long")\n'
VALUE_CHECK = '    if len(value) > 4 * MAX:\n        raise ValueError("header value too long")\n'
PARTITION = '    name, _, value = data.partition(b":")\n'
FIXED = HEADERS.replace(PARTITION, PARTITION + NAME_CHECK)
