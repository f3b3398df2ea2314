"""The English stop words MMOA-RAG's Selector heuristic drops before it compares words.

The paper removes "certain insignificant stop words" without listing them; this is the common English list
(NLTK's, without its apostrophe forms), which already holds the fragments that punctuation stripping
leaves of contractions (`don't` -> `don`, `t`).
A fixed list in the code, not a download, so labels are reproducible offline.
"""

from __future__ import annotations

STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against ain all am an and any are aren as at be because been before being
    below between both but by can couldn d did didn do does doesn doing don down during each few for from
    further had hadn has hasn have haven having he her here hers herself him himself his how i if in into is
    isn it its itself just ll m ma me mightn more most mustn my myself needn no nor not now o of off on once
    only or other our ours ourselves out over own re s same shan she should shouldn so some such t than that
    the their theirs them themselves then there these they this those through to too under until up ve very
    was wasn we were weren what when where which while who whom why will with won wouldn y you your yours
    yourself yourselves
    """.split()
)
"""Lower-cased stop words (matched after punctuation is turned into spaces)."""
