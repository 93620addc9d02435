"""Renderers: model in, str/bytes out (text, DOT, HTML, card, SVG through Graphviz, the bundle)."""
