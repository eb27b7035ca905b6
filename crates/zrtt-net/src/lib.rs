//! zrtt transport (being written).
