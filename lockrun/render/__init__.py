"""Drawing for humans: the tables (``tables``), the text timeline (``timeline_text``) and the
SVG one (``timeline_svg``), and JSON. The only place rich is imported, and only when a table is
drawn. May import ``views`` and below.
"""
