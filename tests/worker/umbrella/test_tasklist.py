"""An umbrella's task list: which lines are units of work a split makes sub-issues of."""

from __future__ import annotations

from worker.umbrella.tasklist import MAX_ITEM_CHARS, Item, items

BODY = """\
Ship the widgets rework.

- [ ] Rename `spin` to `rotate`
- [x] Drop Python 3.9
* [ ] Document the new API
  - [ ] a nested step is part of its parent
1. [X] Bump the version
2) [ ] Update the changelog
- [ ]
- [] not a box
-  [ ] two spaces: not a box either

```markdown
- [ ] inside a fence: not an item
```

~~~
- [ ] nor here
~~~
"""


def test_the_top_level_boxes_in_order_ticked_or_not_with_what_is_indented_under_them() -> None:
    assert items(BODY) == [
        Item(1, "Rename `spin` to `rotate`", False),
        Item(2, "Drop Python 3.9", True),
        Item(3, "Document the new API\n- [ ] a nested step is part of its parent", False),
        Item(4, "Bump the version", True),
        Item(5, "Update the changelog", False),
    ]
    [item] = items('- [ ] Add a page\n\n  ```json\n  {"a": 1}\n  ```\nAfter the list.\n')
    assert item.text == 'Add a page\n```json\n{"a": 1}\n```'
    assert item.title == "Add a page"


def test_no_body_no_items_and_long_items_are_cut() -> None:
    assert items(None) == []
    assert items("no list here\n\n- plain bullet") == []
    [long] = items("- [ ] " + "x" * (MAX_ITEM_CHARS + 50))
    assert len(long.text) == MAX_ITEM_CHARS


def test_an_unclosed_fence_hides_the_rest_as_github_does() -> None:
    assert items("- [ ] one\n```\n- [ ] two\n") == [Item(1, "one", False)]
    assert items("- [ ] one\r\n- [ ] two\r\n") == [Item(1, "one", False), Item(2, "two", False)]
