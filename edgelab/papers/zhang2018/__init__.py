"""Zhang et al. 2018: heterogeneous distributed DNNs on an end / edge / cloud hierarchy.

Zhang et al. 2018, heterogeneous distributed DNNs on an end / edge / cloud hierarchy: the tiers' networks
and times (Tables 1-2), the schemes (Figs 1, 3, eq1-6), privacy (Tables 3-4, eq7-8), fault tolerance (Table 5,
Fig 4, eq9) and the networks (Fig 2), each experiment beside its figures.
"""

from __future__ import annotations
