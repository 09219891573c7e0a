"""Park, Lee and Kim 2020: distributed training on ten Raspberry Pi 3B.

Park, Lee and Kim 2020, hardware resource analysis of distributed training on ten Raspberry Pi 3B: LeNet
(Tables 1-2, Fig 4), ResNet (Figs 1-2, 5-7, Tables 3-4) and sync against async (Fig 3), each experiment beside
its figures.
"""

from __future__ import annotations
