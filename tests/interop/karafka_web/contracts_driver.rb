# frozen_string_literal: true

# Runs Karafka Web's own tracking contracts (vendored unmodified under vendor/, see
# vendor/MANIFEST) over reports read as JSON lines on stdin, one verdict per line on stdout.
#
# Input line:  {"contract": "report" | "error", "report": <the report as decoded from its topic>}
# Output line: {"contract": ..., "errors": ["<field path>: <message>", ...]} (empty: valid)
#
# Karafka Web runs these contracts in the sending process over its in-memory report, before
# serialising it. This driver rebuilds that form from the JSON: symbol keys, and tags as
# Karafka::Core::Taggable::Tags (the sender holds Tags there and writes them as an array of
# strings); an array with anything but strings stays an array and fails the contract.
#
# Only Ruby's standard library is used, plus stubs for the three things the vendored files
# reference from the rest of their gems, which would otherwise pull in librdkafka.

require "json"
require "yaml"
require "pathname"

VENDOR = File.join(__dir__, "vendor")

module Karafka
  # karafka's lib/karafka/errors.rb: the base of Karafka Web's ContractError.
  module Errors
    BaseError = Class.new(StandardError)
  end

  # karafka's config importer, included by Karafka::Status; the contracts only read
  # Karafka::Status::STATES, never a status instance's configuration.
  module Helpers
    class ConfigImporter < Module
      def initialize(**)
        super()
      end
    end
  end

  # The gem's root, where Karafka Web's contracts load their error messages from.
  module Web
    def self.gem_root
      Pathname.new(File.join(VENDOR, "karafka-web"))
    end
  end
end

%w[
  karafka-core/lib/karafka/core
  karafka-core/lib/karafka/core/configurable
  karafka-core/lib/karafka/core/configurable/leaf
  karafka-core/lib/karafka/core/configurable/node
  karafka-core/lib/karafka/core/contractable
  karafka-core/lib/karafka/core/contractable/contract
  karafka-core/lib/karafka/core/contractable/result
  karafka-core/lib/karafka/core/contractable/rule
  karafka-core/lib/karafka/core/taggable/tags
  karafka/lib/karafka/status
  karafka-web/lib/karafka/web/errors
  karafka-web/lib/karafka/web/contracts/base
  karafka-web/lib/karafka/web/tracking/contracts/error
  karafka-web/lib/karafka/web/tracking/consumers/contracts/partition
  karafka-web/lib/karafka/web/tracking/consumers/contracts/topic
  karafka-web/lib/karafka/web/tracking/consumers/contracts/subscription_group
  karafka-web/lib/karafka/web/tracking/consumers/contracts/consumer_group
  karafka-web/lib/karafka/web/tracking/consumers/contracts/job
  karafka-web/lib/karafka/web/tracking/consumers/contracts/report
].each { |file| require File.join(VENDOR, file) }

CONTRACTS = {
  "report" => Karafka::Web::Tracking::Consumers::Contracts::Report.new,
  "error" => Karafka::Web::Tracking::Contracts::Error.new
}.freeze

# The tags as the sender holds them, or the value itself when it is not an array of strings.
def as_tags(value)
  return value unless value.is_a?(Array) && value.all?(String)

  tags = Karafka::Core::Taggable::Tags.new
  value.each_with_index { |tag, index| tags.add(index, tag) }
  tags
end

# The report in the sender's in-memory form (see the top of this file).
def in_memory(report)
  return report unless report.is_a?(Hash)

  process = report[:process]
  process[:tags] = as_tags(process[:tags]) if process.is_a?(Hash) && process.key?(:tags)
  jobs = report[:jobs]
  if jobs.is_a?(Array)
    jobs.each { |job| job[:tags] = as_tags(job[:tags]) if job.is_a?(Hash) && job.key?(:tags) }
  end
  report
end

# Errors of the report's own fields as "path: message"; a nested contract (consumer group,
# subscription group, topic, partition, job) that fails raises with its own errors instead.
def verdict(contract, report)
  contract.call(in_memory(report)).errors.map { |path, message| "#{path}: #{message}" }
rescue Karafka::Web::Errors::ContractError => e
  ["nested contract: #{e.message}"]
end

$stdout.sync = true
$stdin.each_line do |line|
  request = JSON.parse(line, symbolize_names: true)
  name = request.fetch(:contract)
  contract = CONTRACTS.fetch(name) { abort("unknown contract #{name.inspect}") }
  puts JSON.generate({contract: name, errors: verdict(contract, request.fetch(:report))})
end
