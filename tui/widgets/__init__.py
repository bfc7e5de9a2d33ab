"""One module per pane of the app. Widgets only render engine state; they never decode."""
