//! zrtt keys in DNS (being written).
