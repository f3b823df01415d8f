"""The DVFS fallback controllers (Joulie's and the adaptive one) and the choice between them."""
