package com.example.orders;

/**
 * The failures of the order service, by payload kind. The record's key is the order id, its value the kind:
 * {@code ok}, {@code transient:N} (the payment service times out on the first N attempts), {@code invalid}
 * (no customer: fails on every attempt and ends in orders-validation-dlt; routing an exception to its own DLT
 * does not make it fatal in Spring) or {@code poison} (fails on every attempt, ends in orders-dlt).
 */
public final class OrderFailures {

	private OrderFailures() {
	}

	/** Fails the way the order's kind says, on the given attempt (1 on the main topic). */
	public static void handle(String kind, int attempt) {
		String value = kind == null ? "" : kind.trim();
		if (value.equals("ok")) {
			return;
		}
		if (value.equals("invalid")) {
			throw new InvalidOrderException("order has no customer");
		}
		if (value.equals("poison")) {
			throw new PoisonOrderException("no exchange rate for CHF");
		}
		if (value.startsWith("transient:")) {
			int failures = Integer.parseInt(value.substring("transient:".length()));
			if (attempt <= failures) {
				throw new PaymentTimeoutException("payment service timed out on attempt " + attempt);
			}
			return;
		}
		throw new InvalidOrderException("unknown order kind: " + value);
	}

	/** Routed to the exception-based DLT {@code orders-validation-dlt} once its attempts are spent. */
	public static class InvalidOrderException extends RuntimeException {

		public InvalidOrderException(String message) {
			super(message);
		}

	}

	/** Transient: goes through on a later attempt. */
	public static class PaymentTimeoutException extends RuntimeException {

		public PaymentTimeoutException(String message) {
			super(message);
		}

	}

	/** A bug: every attempt fails, the order ends in orders-dlt. */
	public static class PoisonOrderException extends RuntimeException {

		public PoisonOrderException(String message) {
			super(message);
		}

	}

}
