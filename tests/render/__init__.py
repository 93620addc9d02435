"""Tests of dynscope/_render: text, DOT, SVG, HTML, cards and scripts, mostly from stored reports."""
