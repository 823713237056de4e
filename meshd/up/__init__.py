"""``mesh up``: several agents from one file under one supervisor, and what ``mesh status`` shows of them."""
