"""Layout checks shared by the browser tests: what a small screen would clip."""

CLIPPED_JS = """() => {
  const width = document.documentElement.clientWidth, found = [];
  const scrollsItself = el => {
    for (let p = el; p && p !== document.body; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (['auto', 'scroll'].includes(s.overflowX) && p.scrollWidth > p.clientWidth) return true;
    }
    return false;
  };
  for (const el of document.querySelectorAll('main *')) {
    const box = el.getBoundingClientRect();
    const outside = box.width > 0 && box.right > width + 1;
    if (outside && !scrollsItself(el)) found.push(el.tagName + '.' + el.className);
  }
  return found.slice(0, 5);
}"""


def clipped(page) -> list[str]:
    """Elements reaching past the viewport's right edge without a scrolling box around them."""
    return page.evaluate(CLIPPED_JS)


def page_scrolls_sideways(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth + 1")
