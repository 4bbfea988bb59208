"""Parses an HTML report: balanced tags, one svg, a table, no external resources."""
import html.parser
import sys

VOID = {"meta", "br", "rect", "line", "img", "hr", "input", "link"}


class Checker(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.seen = [], {}

    def handle_starttag(self, tag, attrs):
        self.seen[tag] = self.seen.get(tag, 0) + 1
        for name, value in attrs:
            assert name not in ("src", "href"), "external resource: %s=%s" % (name, value)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.seen[tag] = self.seen.get(tag, 0) + 1

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert self.stack and self.stack[-1] == tag, "unbalanced </%s>, open: %s" % (tag, self.stack)
        self.stack.pop()


checker = Checker()
with open(sys.argv[1]) as f:
    checker.feed(f.read())
checker.close()
assert not checker.stack, "unclosed: %s" % checker.stack
for tag in ("html", "head", "body", "svg", "table", "rect", "tr"):
    assert checker.seen.get(tag), "missing <%s>" % tag
print("ok")
