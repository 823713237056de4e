"""SQL, one module per aggregate. Functions take a connection (or pool) and
return plain dicts/records; rules live in ``app.domain``."""
