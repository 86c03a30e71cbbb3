package com.example.orders;

import java.nio.file.Files;
import java.nio.file.Path;

import org.apache.kafka.clients.consumer.ConsumerRecord;

import org.springframework.beans.factory.annotation.Value;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.stereotype.Component;
import org.springframework.util.backoff.FixedBackOff;

/**
 * The blocking-retry family: payments are retried in place (3 deliveries), then a plain
 * {@link DeadLetterPublishingRecoverer} writes them to {@code payments-dlt} with {@code kafka_dlt-*} headers.
 * A {@code poison} payment fails until the fix is deployed (the file {@code orders.payments.fixed-flag} exists).
 */
@Component
public class PaymentsListener {

	private final ServiceEvents events;

	private final Path fixedFlag;

	public PaymentsListener(ServiceEvents events, @Value("${orders.payments.fixed-flag}") String fixedFlag) {
		this.events = events;
		this.fixedFlag = Path.of(fixedFlag);
	}

	@Bean
	static ConcurrentKafkaListenerContainerFactory<Object, Object> blockingRetryFactory(
			ConsumerFactory<Object, Object> consumerFactory, KafkaTemplate<Object, Object> template) {
		ConcurrentKafkaListenerContainerFactory<Object, Object> factory = new ConcurrentKafkaListenerContainerFactory<>();
		factory.setConsumerFactory(consumerFactory);
		factory.setCommonErrorHandler(
				new DefaultErrorHandler(new DeadLetterPublishingRecoverer(template), new FixedBackOff(0, 2)));
		return factory;
	}

	@KafkaListener(id = "payments", groupId = "payments-service", topics = "${orders.payments.topic}",
			containerFactory = "blockingRetryFactory", autoStartup = "${orders.payments.enabled}")
	public void onPayment(ConsumerRecord<String, String> payment) {
		RuntimeException failure = null;
		if ("poison".equals(payment.value()) && !Files.exists(this.fixedFlag)) {
			failure = new OrderFailures.PoisonOrderException("no exchange rate for CHF");
		}
		this.events.handled("payments", payment, 1, failure);
		if (failure != null) {
			throw failure;
		}
	}

}
