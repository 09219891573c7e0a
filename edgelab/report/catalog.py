"""Every id of the four documents' catalog, in the catalog's order, and the work that will render each.

The ids are transcribed from ``../shared/papers/catalog/`` (a test checks the
two agree when that folder is present), so the report can list every figure,
table, equation and claim — rendered, or marked not yet with the open work
that will render it — and none is forgotten silently.
"""

from __future__ import annotations

import re
from pathlib import Path

from edgelab.common.errors import ConfigError

#: The documents, in the catalog README's order, with their titles.
DOCUMENTS = {
    "park2020": "Park, Lee, Kim 2020 — Hardware Resource Analysis in Distributed Training with Edge Devices",
    "zhang2018": "Zhang 2018 — Optimization of Deep Learning Applications in Highly Heterogeneous Distributed System",
    "qiao": "Qiao et al. — Edge Computing and Distributed Intelligence (survey chapter)",
    "jeon": "Jeon et al. — Implementation of AIoT Edge Cluster System via Distributed Deep Learning Pipeline",
}

_IDS = {
    "park2020": [
        *(f"fig{i}" for i in ("1", "2", "3a", "3b")),
        *(f"fig4{p}" for p in "abcd"),
        "fig5a",
        "fig5b",
        *(f"fig{n}{p}" for n in (6, 7) for p in "abcd"),
        *(f"table{i}" for i in range(1, 5)),
    ],
    "zhang2018": [
        *(f"fig{i}" for i in range(1, 5)),
        *(f"table{i}" for i in range(1, 6)),
        *(f"eq{i}" for i in range(1, 10)),
    ],
    "qiao": [
        "fig1-1",
        "fig2-1",
        "table2-1",
        "table-abbrev",
        "fig3-1",
        "fig3-2",
        "fig3-3",
        "fig3-3a",
        "fig3-3b",
        "fig3-4",
        "fig3-4a",
        "fig3-4b",
        "fig3-4c",
        "fig3-5",
        "fig3-5a",
        "fig3-5b",
        "fig3-6",
        "fig3-7",
        "eq-conv-cost",
        "eq-dwconv-cost",
        "eq-dwconv-ratio",
        "eq-mobilenet-8to9x",
        "eq-group-conv",
        "eq-squeezenet-50x",
        "eq-gpipe-bubble",
        "eq-comm-volume",
        "eq-normalized-entropy",
        "method-placement",
        "method-compression",
        "method-fedavg",
        "method-grad-quant",
        "method-grad-sparsify",
    ],
    "jeon": [
        *(f"fig{i}" for i in range(1, 12)),
        "table1",
        "eq-layer-split",
        "eq-speedup",
        "eq-augmentation",
        "eq-pipeline-bound",
    ],
}

#: Every catalog id, document by document in the catalog's order.
IDS: tuple[str, ...] = tuple(f"{doc}/{item}" for doc in DOCUMENTS for item in _IDS[doc])

# The open work that renders the ids no notebook renders yet (none today: every id has its notebook).
PLANNED: dict[str, str] = {}


def document_of(item_id: str) -> str:
    """The document an id belongs to (``park2020/table1`` -> ``park2020``)."""
    doc = item_id.partition("/")[0]
    if item_id not in IDS:
        raise ConfigError("id", item_id, f"a catalog id such as {IDS[0]} (documents: {', '.join(DOCUMENTS)})")
    return doc


def not_yet(item_id: str) -> str:
    """Why an id is not rendered: the work that will render it."""
    document_of(item_id)
    planned = PLANNED.get(item_id)
    return f"not yet: {planned}" if planned else "not yet: its notebook has not run here"


def select(only: list[str] | None) -> list[str]:
    """The ids named by ``only`` (documents or ids, in any mix), in catalog order; every id when empty.

    Raises ``ConfigError`` naming the first entry that is neither a document nor an id.
    """
    if not only:
        return list(IDS)
    for name in only:
        if name not in DOCUMENTS and name not in IDS:
            raise ConfigError("only", name, f"a document ({', '.join(DOCUMENTS)}) or a catalog id such as {IDS[0]}")
    return [i for i in IDS if i in only or i.partition("/")[0] in only]


def read_catalog(folder: Path) -> list[str]:
    """The ids a catalog folder lists (``### doc/item`` headings), in its files' order of ``DOCUMENTS``."""
    ids = []
    for doc in DOCUMENTS:
        text = (folder / f"{doc}.md").read_text(encoding="utf-8")
        ids += re.findall(r"^### ([a-z0-9]+/[a-z0-9-]+)\s*$", text, flags=re.MULTILINE)
    return ids
