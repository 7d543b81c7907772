//! RFC 1982 serial-number arithmetic over 32 bits (AMQP 1.0 part 2 section 2.8.9,
//! `sequence-no`), and the link-credit computation built on it.

/// A 32-bit serial number: comparisons and differences wrap around.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SerialNumber(pub u32);

impl SerialNumber {
    /// `self + n`, wrapping.
    #[inline]
    pub fn plus(self, n: u32) -> SerialNumber {
        SerialNumber(self.0.wrapping_add(n))
    }

    /// The signed distance from `other` to `self` (positive when `self` is ahead).
    /// Defined for distances below 2^31, as RFC 1982 requires.
    #[inline]
    pub fn diff(self, other: SerialNumber) -> i64 {
        self.0.wrapping_sub(other.0) as i32 as i64
    }

    /// RFC 1982 "less than".
    #[inline]
    pub fn lt(self, other: SerialNumber) -> bool {
        self != other && other.0.wrapping_sub(self.0) < 0x8000_0000
    }

    /// True when `self` lies in the closed range `first..=last`, in serial order.
    #[inline]
    pub fn in_range(self, first: SerialNumber, last: SerialNumber) -> bool {
        let span = last.0.wrapping_sub(first.0);
        self.0.wrapping_sub(first.0) <= span
    }
}

/// The sender's link credit after a FLOW from the receiver (2.6.7):
/// `(flow.delivery-count + flow.link-credit) − sender.delivery-count`, floored at 0.
///
/// `flow_delivery_count` is None when the receiver has not yet seen the sender's
/// attach; the sender's own initial delivery-count is used then.
#[inline]
pub fn effective_credit(
    flow_delivery_count: Option<u32>,
    flow_link_credit: u32,
    sender_delivery_count: u32,
    initial_delivery_count: u32,
) -> u32 {
    let receiver_count = SerialNumber(flow_delivery_count.unwrap_or(initial_delivery_count));
    // Deliveries the sender made that the receiver had not seen when it wrote the FLOW.
    let in_flight = SerialNumber(sender_delivery_count).diff(receiver_count);
    (flow_link_credit as i64 - in_flight).clamp(0, u32::MAX as i64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_comparison_wraps() {
        assert!(SerialNumber(u32::MAX).lt(SerialNumber(0)));
        assert!(SerialNumber(0).lt(SerialNumber(1)));
        assert!(!SerialNumber(1).lt(SerialNumber(1)));
        assert_eq!(SerialNumber(2).diff(SerialNumber(u32::MAX)), 3);
        assert_eq!(SerialNumber(u32::MAX).diff(SerialNumber(2)), -3);
        assert!(SerialNumber(1).in_range(SerialNumber(u32::MAX - 1), SerialNumber(3)));
        assert!(!SerialNumber(4).in_range(SerialNumber(u32::MAX - 1), SerialNumber(3)));
    }

    #[test]
    fn effective_credit_formula() {
        // Plain case: receiver saw all our deliveries.
        assert_eq!(effective_credit(Some(10), 5, 10, 0), 5);
        // Two of our deliveries were in flight when the receiver granted credit.
        assert_eq!(effective_credit(Some(10), 5, 12, 0), 3);
        // More in flight than granted: floored at zero, never negative.
        assert_eq!(effective_credit(Some(10), 5, 20, 0), 0);
        // Wrap-around of delivery-count.
        assert_eq!(effective_credit(Some(u32::MAX - 1), 10, 3, 0), 5);
        // Receiver has not seen our attach: initial delivery-count is used.
        assert_eq!(effective_credit(None, 100, 7, 7), 100);
        // Credit as large as the type allows.
        assert_eq!(effective_credit(Some(0), u32::MAX, 0, 0), u32::MAX);
    }
}
