"""The node table's view: sorting, a filter, stable widths, one Tab stop, keys on a row.

Columns are as wide as their widest likely content from the start (a ticking
countdown never makes them jump); the person may still drag them, and the last
one (the reason) takes the rest. Tab enters and leaves the table in one step;
arrows move between rows. Enter opens the row, Delete asks to remove it. A filter that hides
every row says so in the table ("No node matches …").

In a fleet each computer's header row spans the table; sorting sorts the nodes within each
computer (the computers keep their order), and the filter keeps the header of a computer while
one of its nodes matches.
"""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, QSortFilterProxyModel, Qt, Signal
from PySide6.QtGui import QKeyEvent, QPalette
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QStyle, QStyledItemDelegate, QTableView, QWidget

from cadre_desktop.ui.nodes.model import COLUMNS, HEADER_ROLE, NAME, SORT_ROLE, STATUS, WIDEST, NodeTableModel

PADDING = 28
#: The reason column (the last, it takes the rest) is at least this wide at the default size.
REASON_AT_LEAST = "exited with code 1: cannot open"
#: The name column is at least this wide once another computer's nodes show.
FLEET_WIDEST_NAME = "Living room · on nas"


class NodeProxy(QSortFilterProxyModel):
    """Sorts by each column's sort key; the filter matches any column's text, the node's id and its computer's name."""

    def __init__(self, model: NodeTableModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.setSourceModel(model)
        self._model = model
        self.setSortRole(SORT_ROLE)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setDynamicSortFilter(True)
        self._needle = ""

    def filterAcceptsRow(self, row: int, parent: QModelIndex | QPersistentModelIndex) -> bool:  # noqa: N802
        if not self._needle:
            return True
        if self._model.group_at(row) is not None:  # a computer's header: while one of its nodes matches
            return any(self._matches(member) for member in self._model.members(row))
        return self._matches(row)

    def _matches(self, row: int) -> bool:
        model, needle = self._model, self._needle
        v = model.view_at(row)
        if v is None:
            return False
        haystack = [v.id, model.computer_label(v)] + [model.text(v, col) for col in range(len(COLUMNS))]
        return any(needle in text.casefold() for text in haystack)

    def lessThan(self, left: QModelIndex | QPersistentModelIndex, right: QModelIndex | QPersistentModelIndex) -> bool:  # noqa: N802
        """Within one computer by the column's key; across computers (and a header before its nodes) in
        the computers' order, whichever way the column sorts (Qt turns a descending sort's answers round)."""
        model = self._model
        if model.grouped:
            at_left, at_right = model.placement(left.row()), model.placement(right.row())
            if at_left != at_right or at_left[1] == 0:
                if self.sortOrder() == Qt.SortOrder.DescendingOrder:
                    return at_right < at_left
                return at_left < at_right
        v_left, v_right = model.view_at(left.row()), model.view_at(right.row())
        if v_left is None or v_right is None:
            return False
        col = left.column()  # the column's sort key, read here rather than through a QVariant each
        return model.sort_key(v_left, col) < model.sort_key(v_right, col)

    def set_filter(self, text: str) -> None:
        """Plain text, kept as typed: Qt's fixed-string filter stores it as an escaped pattern
        ("Bulk\\-07"), which no cell contains."""
        self.beginFilterChange()
        self._needle = text.strip().casefold()
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)


class StatusDelegate(QStyledItemDelegate):
    """The status colour on a plain row; the selection's own text colour on a selected one."""

    def initStyleOption(self, option, index) -> None:  # noqa: N802
        super().initStyleOption(option, index)
        if option.state & QStyle.StateFlag.State_Selected:
            colour = option.palette.color(QPalette.ColorRole.HighlightedText)
            option.palette.setColor(QPalette.ColorRole.Text, colour)
            option.palette.setColor(QPalette.ColorRole.WindowText, colour)
            option.backgroundBrush = option.palette.highlight()


class NodeTable(QTableView):
    #: Enter on a row: show its QR code (or its log).
    open_requested = Signal()
    #: Delete on a row.
    remove_requested = Signal()

    def __init__(self, proxy: NodeProxy, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setModel(proxy)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setTabKeyNavigation(False)
        self.setSortingEnabled(True)
        self.sortByColumn(-1, Qt.SortOrder.AscendingOrder)  # added order until a header is clicked
        self.verticalHeader().hide()
        self.setWordWrap(False)
        self.setItemDelegateForColumn(STATUS, StatusDelegate(self))
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        header.setSortIndicatorShown(True)
        self.set_widths()
        self.no_match = QLabel(self.viewport())
        self.no_match.setTextFormat(Qt.TextFormat.PlainText)  # the filter's text as typed, never markup
        self.no_match.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.no_match.setWordWrap(True)
        self.no_match.setEnabled(False)  # the palette's quieter text
        self.no_match.hide()
        self._spanned = False
        for signal in (proxy.layoutChanged, proxy.rowsInserted, proxy.rowsRemoved, proxy.modelReset):
            signal.connect(self.span_headers)
        self.span_headers()

    def first_node_row(self) -> int | None:
        """The first row that is a node (a fleet's first row is a computer's header)."""
        proxy = self.model()
        return next((r for r in range(proxy.rowCount()) if proxy.index(r, 0).data(Qt.ItemDataRole.UserRole)), None)

    def span_headers(self, *_) -> None:
        """Each computer's header row across every column (a fleet's window; none for a lone computer)."""
        proxy = self.model()
        rows = [r for r in range(proxy.rowCount()) if proxy.index(r, 0).data(HEADER_ROLE)]
        if not rows and not self._spanned:
            return
        self.clearSpans()
        for row in rows:
            self.setSpan(row, 0, 1, len(COLUMNS))
        if rows and not self._spanned:  # a fleet's names say their computer ("Attic · on nas")
            wide = self.fontMetrics().horizontalAdvance(FLEET_WIDEST_NAME) + PADDING
            self.setColumnWidth(NAME, max(self.columnWidth(NAME), wide))
        self._spanned = bool(rows)

    def say_no_match(self, needle: str) -> None:
        """Over the empty table: no row matches this filter ("" while any row shows)."""
        needle = " ".join(needle.split())
        if needle and self.model().rowCount() == 0:
            shown = needle if len(needle) <= 60 else needle[:59] + "…"
            self.no_match.setText(f"No node matches “{shown}”")
            self.no_match.setGeometry(self.viewport().rect())
            self.no_match.show()
        else:
            self.no_match.hide()

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self.no_match.setGeometry(self.viewport().rect())

    def set_widths(self) -> None:
        metrics = self.fontMetrics()
        for col, (title, widest) in enumerate(zip(COLUMNS, WIDEST)):
            if widest:
                self.setColumnWidth(col, max(metrics.horizontalAdvance(widest) + self._decoration(col),
                                             metrics.horizontalAdvance(title) + 16) + PADDING)

    def _decoration(self, col: int) -> int:
        """The room a column's icon takes before its text (the status dot)."""
        if col != STATUS:
            return 0
        style = self.style()
        return (style.pixelMetric(QStyle.PixelMetric.PM_SmallIconSize, None, self)
                + 2 * style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, self) + 4)

    def wanted_width(self) -> int:
        """As wide as every column and some of the reason, without a horizontal scrollbar."""
        columns = sum(self.columnWidth(col) for col in range(len(COLUMNS) - 1))
        reason = self.fontMetrics().horizontalAdvance(REASON_AT_LEAST) + PADDING
        scrollbar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent, None, self)
        return columns + reason + scrollbar + 2 * self.frameWidth()

    def moveCursor(self, action: QAbstractItemView.CursorAction, modifiers: Qt.KeyboardModifier) -> QModelIndex:  # noqa: N802
        """The arrows, Page and Home/End step over a computer's header to the next node that way."""
        index = super().moveCursor(action, modifiers)
        proxy = self.model()
        if not index.isValid() or not index.data(HEADER_ROLE):
            return index
        Move = QAbstractItemView.CursorAction  # noqa: N806
        step = -1 if action in (Move.MoveUp, Move.MovePageUp, Move.MoveEnd) else 1
        row = index.row()
        while 0 <= row < proxy.rowCount() and proxy.index(row, 0).data(HEADER_ROLE):
            row += step
        return proxy.index(row, index.column()) if 0 <= row < proxy.rowCount() else self.currentIndex()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        key = event.key()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.currentIndex().isValid():
            self.open_requested.emit()
        elif key == Qt.Key.Key_Delete and self.currentIndex().isValid():
            self.remove_requested.emit()
        else:
            super().keyPressEvent(event)
