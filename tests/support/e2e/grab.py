"""Save a screenshot of the X screen: grab.py OUT.png [X Y W H].

With a box, only the box is saved, and its colours are printed, most frequent
first, as `#rrggbb count` lines, so a test can tell what is drawn there.
"""

import sys
from collections import Counter

from PySide6.QtGui import QGuiApplication

app = QGuiApplication(sys.argv[:1])
box = [int(v) for v in sys.argv[2:6]]
shot = app.primaryScreen().grabWindow(0, *box) if box else app.primaryScreen().grabWindow(0)
if not shot.save(sys.argv[1]):
    sys.exit(f"cannot save {sys.argv[1]}")
if box:
    image = shot.toImage()
    colours = Counter(image.pixelColor(x, y).name() for x in range(image.width()) for y in range(image.height()))
    for colour, count in colours.most_common():
        print(colour, count)
