"""Stage 5: records -> numbers. Pure numpy; the one typed PointResult schema lives here."""
