"""The three ways GitHub merges a pull request, made in a bare repository with git's plumbing.

Each answers the base branch's new tip and moves no ref (:mod:`emulator.merging` does, once,
only if the base has not moved meanwhile), so a refusal leaves the repository as it was but
for unreachable objects. GitHub's docs ("About pull request merges") describe them:

* ``merge``: a merge commit with two parents, the base's tip and the head (``--no-ff``);
* ``squash``: one commit on the base's tip with the merge's tree (the combined change);
* ``rebase``: the head's commits replayed one by one onto the base's tip, each with its own
  author and message and a new committer ("Rebase and merge on GitHub will always update the
  committer information and create new commit SHAs"). Merge commits in the head are left out,
  as ``git rebase`` leaves them out, and the rebase is refused when it runs into a conflict or
  is "unsafe": when it would "produce a different result than a merge would".

A conflict is :class:`Unmergeable`. git 2.39 (the oldest this runs on) has
``merge-tree --write-tree`` but not its ``--merge-base``, so a commit is replayed by merging it
with a throw-away commit that holds the current tree on the replayed commit's parent: their
only merge base is that parent, which makes the merge a cherry-pick.
"""

from __future__ import annotations

from emulator.gitrepo import GitRepo, Signature

#: At most this many commits are replayed by a rebase (the emulator's bound; GitHub documents none).
MAX_REBASE_COMMITS = 1000


class Unmergeable(Exception):
    """The merge cannot be made: a conflict, or a rebase that would differ from the merge."""


def merged_tree(git: GitRepo, base_tip: str, head: str) -> str:
    """The tree a merge of ``head`` into ``base_tip`` leaves, or :class:`Unmergeable`."""
    tree = git.merge_tree(base_tip, head)
    if tree is None:
        raise Unmergeable(f"{head} conflicts with {base_tip}")
    return tree


def merge_commit(
    git: GitRepo, base_tip: str, head: str, message: str, *, author: Signature, committer: Signature
) -> str:
    """A merge commit: parents the base's tip, then the head."""
    tree = merged_tree(git, base_tip, head)
    return git.commit_tree(tree, [base_tip, head], message, author=author, committer=committer)


def squash(
    git: GitRepo, base_tip: str, head: str, message: str, *, author: Signature, committer: Signature
) -> str:
    """One commit on the base's tip holding everything the head changed since the merge base."""
    tree = merged_tree(git, base_tip, head)
    return git.commit_tree(tree, [base_tip], message, author=author, committer=committer)


def _replay(git: GitRepo, onto: str, sha: str, parent: str, *, committer: Signature) -> str:
    """``sha``'s change (against ``parent``) as a new commit on ``onto``: a cherry-pick."""
    meta = git.commit_meta(sha)
    here = git.commit_meta(onto).tree
    stand_in = git.commit_tree(here, [parent], "replay", author=committer, committer=committer)
    tree = git.merge_tree(stand_in, sha)
    if tree is None:
        raise Unmergeable(f"{sha} does not replay onto {onto}")
    author = Signature(meta.author_name, meta.author_email, meta.timestamp)
    return git.commit_tree(tree, [onto], meta.message, author=author, committer=committer)


def rebase(git: GitRepo, base_tip: str, head: str, *, committer: Signature) -> str:
    """The head's own commits (``base_tip..head``, oldest first, merges left out) onto ``base_tip``."""
    expected = merged_tree(git, base_tip, head)
    tip = base_tip
    shas = git.range_commits(base_tip, head, MAX_REBASE_COMMITS + 1)
    if len(shas) > MAX_REBASE_COMMITS:
        raise Unmergeable(f"more than {MAX_REBASE_COMMITS} commits to rebase")
    for meta in git.commit_metas(shas):
        if len(meta.parents) != 1:  # a merge commit (or a root): git rebase drops merges
            if not meta.parents:
                raise Unmergeable(f"{meta.sha} has no parent to replay it against")
            continue
        tip = _replay(git, tip, meta.sha, meta.parents[0], committer=committer)
    if git.commit_meta(tip).tree != expected:
        raise Unmergeable("the rebase would produce a different result than a merge would")
    return tip
