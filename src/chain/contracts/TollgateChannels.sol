// SPDX-License-Identifier: MIT
pragma solidity 0.8.30;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";

/// The EIP-3009 entry point used to pull a deposit: the `bytes signature` form of USDC (FiatToken v2.2),
/// which also accepts ERC-1271 wallets.
interface IERC3009Receive {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature
    ) external;
}

/// @title TollgateChannels
/// @notice Prepaid payment channels. A payer deposits tokens for one payee and authorises a P-256 session
/// key; every paid request then carries an off-chain voucher signed by that key over the cumulative amount
/// spent. The payee (or an operator it named, such as a facilitator) claims the latest vouchers of many
/// channels in one `claimMany`; the payer gets back what was not claimed by a cooperative close, or alone
/// after `closeDelay` seconds once it asked to close.
/// @dev Invariants (docs/channels.md states them for users):
/// - claimed <= deposit, and claimed only grows: a voucher pays `cumulative - claimed`, so an old or
///   replayed voucher pays nothing and a voucher above the deposit is refused.
/// - A voucher is bound to (chain id, this contract, channel id): it cannot be used anywhere else, and the
///   channel id binds payer, payee, token and salt.
/// - Money leaves only to the channel's payee (claims) and its payer (close, withdraw); after a channel is
///   closed it holds nothing and accepts nothing, and its id can never be opened again.
/// - Vouchers are checked with the P256VERIFY precompile (RIP-7212 / EIP-7951 at 0x100). On a chain
///   without it the call returns nothing, which is a failed check: claims fail, never pay wrongly, and the
///   payer still recovers its deposit by the timeout.
contract TollgateChannels is EIP712, ReentrancyGuard {
    struct Channel {
        address payer;
        /// Seconds between a payer's close request and the moment it may withdraw.
        uint64 closeDelay;
        address payee;
        /// When the payer asked to close (unix seconds); 0 while open.
        uint64 closeRequestedAt;
        address token;
        bool closed;
        /// The salt's first 8 bytes, kept (in the slot `token` and `closed` leave free) so the payee's gates
        /// can tell from the channel alone which of their voucher stores it was opened for: a payer opens
        /// with a salt that starts with the tag a gate offers, and a gate serves only channels carrying its
        /// own (docs/channels.md, "One voucher, one gate").
        bytes8 tag;
        uint128 deposit;
        uint128 claimed;
        bytes32 sessionKeyX;
        bytes32 sessionKeyY;
    }

    struct Claim {
        bytes32 channelId;
        uint256 cumulativeAmount;
        /// The session key's P-256 signature r ‖ s (64 bytes) over the voucher digest.
        bytes signature;
    }

    /// Domain tag of a voucher: the session key signs
    /// sha256(abi.encode(VOUCHER_TAG, chainid, this, channelId, cumulativeAmount)).
    bytes32 public constant VOUCHER_TAG = keccak256("TollgateChannels.Voucher.v1");
    /// Domain tag of the EIP-3009 nonce that opens a channel (see openNonce).
    bytes32 public constant OPEN_TAG = keccak256("TollgateChannels.Open.v1");
    /// Domain tag of the EIP-3009 nonce that tops a channel up (see topUpNonce).
    bytes32 public constant TOP_UP_TAG = keccak256("TollgateChannels.TopUp.v1");
    bytes32 public constant REQUEST_CLOSE_TYPEHASH = keccak256("RequestClose(bytes32 channelId,uint256 deadline)");

    /// RIP-7212 / EIP-7951 P-256 signature verification precompile.
    address public constant P256_VERIFIER = address(0x100);
    /// Order of the P-256 group: r and s must lie in (0, N).
    uint256 private constant P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551;
    /// Gas given to the precompile (EIP-7951 charges 6 900, RIP-7212 3 450).
    uint256 public constant VERIFY_GAS = 50_000;
    /// Gas forwarded to the token's `transfer` when paying out one claim. A standard ERC-20 needs well under
    /// half of it; a token that burns everything costs each item at most this much.
    uint256 public constant TRANSFER_GAS = 100_000;
    /// Gas an item must find left before it is attempted: the transfer's gas with the 1/64 EIP-150 keeps
    /// back, the signature check and the bookkeeping. Items that find less are deferred, not failed.
    uint256 public constant ITEM_GAS_REQUIRED = (TRANSFER_GAS * 64) / 63 + VERIFY_GAS + 40_000;
    /// Longest close delay a channel may have: 30 days.
    uint64 public constant MAX_CLOSE_DELAY = 30 days;
    /// Shortest close delay a channel may have: 1 hour. The delay is the payee's only time to claim what it
    /// served once the payer asks to close; a shorter one lets a payer request and withdraw (in one block at
    /// a delay of 0) before any voucher can land. An hour covers a gate's claim margin (Tollgate's default
    /// 10 minutes), the seconds it takes to notice the request, and a claim waiting out congestion or an
    /// operator restart, whoever opened the channel. Payers who want out sooner close cooperatively.
    uint64 public constant MIN_CLOSE_DELAY = 1 hours;
    /// Gas an honest item uses at most (a first claim on a channel, a fresh payee balance; bench/gas.ts
    /// measures about 35 000 in a batch of 100). `claimMany` needs ITEM_GAS_REQUIRED for its first item and
    /// this much for each further one before it starts, so the lowest gas at which it succeeds (what
    /// eth_estimateGas finds) attempts every item whose token behaves, never none.
    uint256 public constant ITEM_GAS_TYPICAL = 80_000;

    /// Why a claim item paid nothing (ClaimFailed.reason).
    uint8 public constant FAILURE_NO_CHANNEL = 1;
    uint8 public constant FAILURE_CLOSED = 2;
    uint8 public constant FAILURE_NOT_PAYEE = 3;
    uint8 public constant FAILURE_BAD_SIGNATURE = 4;
    uint8 public constant FAILURE_ABOVE_DEPOSIT = 5;
    uint8 public constant FAILURE_NOTHING_NEW = 6;
    uint8 public constant FAILURE_TRANSFER_FAILED = 7;

    mapping(bytes32 channelId => Channel) private _channels;
    mapping(address payee => mapping(address operator => bool)) public isOperator;

    event ChannelOpened(
        bytes32 indexed channelId,
        address indexed payer,
        address indexed payee,
        address token,
        uint256 deposit,
        bytes32 sessionKeyX,
        bytes32 sessionKeyY,
        uint64 closeDelay
    );
    event ChannelToppedUp(bytes32 indexed channelId, uint256 amount, uint256 deposit);
    event ChannelClaimed(bytes32 indexed channelId, address indexed payee, uint256 cumulativeAmount, uint256 amount);
    event ClaimFailed(bytes32 indexed channelId, uint256 cumulativeAmount, uint8 reason);
    /// Items `firstIndex` to the end were not attempted: too little gas was left. The caller sends them again.
    event ClaimsDeferred(uint256 firstIndex, uint256 count);
    event CloseRequested(bytes32 indexed channelId, uint64 requestedAt, uint64 closableAt);
    /// The channel is finished: `claimed` went to the payee over its life, `refunded` back to the payer now.
    event ChannelClosed(bytes32 indexed channelId, address indexed by, uint256 claimed, uint256 refunded);
    event OperatorSet(address indexed payee, address indexed operator, bool allowed);

    error ChannelExists(bytes32 channelId);
    error ChannelNotFound(bytes32 channelId);
    error ChannelIsClosed(bytes32 channelId);
    error CloseAlreadyRequested(bytes32 channelId);
    error CloseNotRequested(bytes32 channelId);
    error CloseDelayNotOver(bytes32 channelId, uint64 closableAt);
    error NotPayer(bytes32 channelId, address caller);
    error NotPayeeOrOperator(bytes32 channelId, address caller);
    error InvalidTerms();
    error InvalidVoucher(bytes32 channelId, uint8 reason);
    error DepositNotReceived(uint256 expected, uint256 received);
    error TransferFailed(address token, address to, uint256 amount);
    error SignatureExpired(uint256 deadline);
    error InvalidSignature();
    /// `claimMany` was given less gas than its items need before it starts (see ITEM_GAS_TYPICAL).
    error ClaimGasTooLow(uint256 required);

    constructor() EIP712("Tollgate Channels", "1") {}

    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() external view returns (bytes32) {
        return _domainSeparatorV4();
    }

    // ---------------------------------------------------------------- views

    function channels(bytes32 channelId) external view returns (Channel memory) {
        return _channels[channelId];
    }

    /// @notice The id of the channel `payer` opens to `payee` in `token` with `salt`, on this chain and contract.
    function channelIdOf(address payer, address payee, address token, bytes32 salt) public view returns (bytes32) {
        return keccak256(abi.encode(block.chainid, address(this), payer, payee, token, salt));
    }

    /// @notice The EIP-3009 nonce a payer signs to open a channel: it binds the payee, token, session key,
    /// close delay and salt, so the one ReceiveWithAuthorization signature authorises deposit and terms.
    function openNonce(
        address payee,
        address token,
        bytes32 sessionKeyX,
        bytes32 sessionKeyY,
        uint64 closeDelay,
        bytes32 salt
    ) public view returns (bytes32) {
        return keccak256(
            abi.encode(OPEN_TAG, block.chainid, address(this), payee, token, sessionKeyX, sessionKeyY, closeDelay, salt)
        );
    }

    /// @notice The EIP-3009 nonce a payer signs to top `channelId` up; `salt` makes each top-up distinct.
    function topUpNonce(bytes32 channelId, bytes32 salt) public view returns (bytes32) {
        return keccak256(abi.encode(TOP_UP_TAG, block.chainid, address(this), channelId, salt));
    }

    /// @notice The 32-byte digest the session key signs for a voucher.
    function voucherDigest(bytes32 channelId, uint256 cumulativeAmount) public view returns (bytes32) {
        return sha256(abi.encode(VOUCHER_TAG, block.chainid, address(this), channelId, cumulativeAmount));
    }

    /// @notice True when `signature` is the channel's session key signing `cumulativeAmount`.
    function isValidVoucher(bytes32 channelId, uint256 cumulativeAmount, bytes calldata signature)
        external
        view
        returns (bool)
    {
        Channel storage c = _channels[channelId];
        return c.payer != address(0) && _checkVoucher(c, channelId, cumulativeAmount, signature);
    }

    // ---------------------------------------------------------------- operators

    /// @notice Lets `operator` claim and cooperatively close the caller's channels (per payee).
    /// @dev An operator is trusted like the payee's own key for every channel of that payee: it may close one
    /// at once with no new voucher (`closeWithVoucher` with an amount at or below `claimed`), which refunds
    /// the payer and forfeits the vouchers not yet claimed. It cannot pay anyone but the payee and payer.
    function setOperator(address operator, bool allowed) external {
        isOperator[msg.sender][operator] = allowed;
        emit OperatorSet(msg.sender, operator, allowed);
    }

    // ---------------------------------------------------------------- open and top up

    /// @notice Relayed open: pulls `amount` from `payer` with its EIP-3009 ReceiveWithAuthorization whose
    /// nonce is `openNonce(payee, token, sessionKeyX, sessionKeyY, closeDelay, salt)`. Anyone may submit it;
    /// the signature alone fixes every term.
    function openWithAuthorization(
        address payer,
        address payee,
        address token,
        uint256 amount,
        bytes32 sessionKeyX,
        bytes32 sessionKeyY,
        uint64 closeDelay,
        bytes32 salt,
        uint256 validAfter,
        uint256 validBefore,
        bytes calldata signature
    ) external nonReentrant returns (bytes32 channelId) {
        channelId = _create(payer, payee, token, amount, sessionKeyX, sessionKeyY, closeDelay, salt);
        bytes32 nonce = openNonce(payee, token, sessionKeyX, sessionKeyY, closeDelay, salt);
        _receive(token, payer, amount, validAfter, validBefore, nonce, signature);
    }

    /// @notice Direct open by the payer, pulling `amount` with `transferFrom` under its approval.
    function open(
        address payee,
        address token,
        uint256 amount,
        bytes32 sessionKeyX,
        bytes32 sessionKeyY,
        uint64 closeDelay,
        bytes32 salt
    ) external nonReentrant returns (bytes32 channelId) {
        channelId = _create(msg.sender, payee, token, amount, sessionKeyX, sessionKeyY, closeDelay, salt);
        _pullFrom(token, msg.sender, amount);
    }

    /// @notice Relayed top-up: the payer's ReceiveWithAuthorization with nonce `topUpNonce(channelId, salt)`.
    function topUpWithAuthorization(
        bytes32 channelId,
        uint256 amount,
        bytes32 salt,
        uint256 validAfter,
        uint256 validBefore,
        bytes calldata signature
    ) external nonReentrant {
        Channel storage c = _growDeposit(channelId, amount);
        _receive(c.token, c.payer, amount, validAfter, validBefore, topUpNonce(channelId, salt), signature);
    }

    /// @notice Direct top-up by the payer under its approval.
    function topUp(bytes32 channelId, uint256 amount) external nonReentrant {
        Channel storage c = _growDeposit(channelId, amount);
        if (msg.sender != c.payer) revert NotPayer(channelId, msg.sender);
        _pullFrom(c.token, msg.sender, amount);
    }

    function _create(
        address payer,
        address payee,
        address token,
        uint256 amount,
        bytes32 sessionKeyX,
        bytes32 sessionKeyY,
        uint64 closeDelay,
        bytes32 salt
    ) private returns (bytes32 channelId) {
        if (
            payer == address(0) || payee == address(0) || token.code.length == 0 || amount == 0
                || amount > type(uint128).max || sessionKeyX == 0 || sessionKeyY == 0 || closeDelay < MIN_CLOSE_DELAY
                || closeDelay > MAX_CLOSE_DELAY
        ) revert InvalidTerms();
        channelId = channelIdOf(payer, payee, token, salt);
        Channel storage c = _channels[channelId];
        // A closed channel keeps its payer, so an id is never opened twice.
        if (c.payer != address(0)) revert ChannelExists(channelId);
        c.payer = payer;
        c.closeDelay = closeDelay;
        c.payee = payee;
        c.token = token;
        c.deposit = uint128(amount);
        c.sessionKeyX = sessionKeyX;
        c.sessionKeyY = sessionKeyY;
        c.tag = bytes8(salt);
        emit ChannelOpened(channelId, payer, payee, token, amount, sessionKeyX, sessionKeyY, closeDelay);
    }

    function _growDeposit(bytes32 channelId, uint256 amount) private returns (Channel storage c) {
        c = _live(channelId);
        if (c.closeRequestedAt != 0) revert CloseAlreadyRequested(channelId);
        uint256 deposit = uint256(c.deposit) + amount;
        if (amount == 0 || deposit > type(uint128).max) revert InvalidTerms();
        c.deposit = uint128(deposit);
        emit ChannelToppedUp(channelId, amount, deposit);
    }

    // ---------------------------------------------------------------- claims

    /// @notice Pays each item's `cumulativeAmount - claimed` to its channel's payee. The caller must be the
    /// payee or its operator for each item. An item that fails (unknown or closed channel, caller not
    /// allowed, bad signature, above the deposit, nothing new, transfer failed) emits ClaimFailed and pays
    /// nothing; the others go on. `paid[i]` is what item i paid. Reverts ClaimGasTooLow unless it starts
    /// with ITEM_GAS_REQUIRED + (items - 1) * ITEM_GAS_TYPICAL; items after a token that burnt its gas may
    /// still be deferred (ClaimsDeferred).
    function claimMany(Claim[] calldata claims) external nonReentrant returns (uint256[] memory paid) {
        paid = new uint256[](claims.length);
        if (claims.length == 0) return paid;
        // A call that could attempt nothing (or only some honest items) would be mined as a no-op: refuse it,
        // so a gas limit from eth_estimateGas is one under which every honest item is attempted.
        uint256 required = ITEM_GAS_REQUIRED + (claims.length - 1) * ITEM_GAS_TYPICAL;
        if (gasleft() < required) revert ClaimGasTooLow(required);
        for (uint256 i = 0; i < claims.length; ++i) {
            // Invariant: an attempted item was offered its full TRANSFER_GAS, so an honest claim never fails
            // for lack of gas that an earlier token burnt; it is deferred instead.
            if (gasleft() < ITEM_GAS_REQUIRED) {
                emit ClaimsDeferred(i, claims.length - i);
                break;
            }
            uint256 freeMemory;
            assembly ("memory-safe") {
                freeMemory := mload(0x40)
            }
            Claim calldata it = claims[i];
            (uint256 amount, uint8 failure) = _claim(it.channelId, it.cumulativeAmount, it.signature);
            if (failure != 0) emit ClaimFailed(it.channelId, it.cumulativeAmount, failure);
            paid[i] = amount;
            // This item's scratch memory is dead: reuse it, so memory cost does not grow with the batch.
            assembly ("memory-safe") {
                mstore(0x40, freeMemory)
            }
        }
    }

    /// @notice Cooperative close by the payee or its operator: pays the voucher's new amount (if any) to the
    /// payee and the rest of the deposit back to the payer, at once. A voucher at or below what was claimed
    /// (an empty signature is fine then) closes without paying the payee more. Reverts on any fault.
    function closeWithVoucher(bytes32 channelId, uint256 cumulativeAmount, bytes calldata signature)
        external
        nonReentrant
    {
        Channel storage c = _live(channelId);
        if (!_isPayeeOrOperator(c.payee)) revert NotPayeeOrOperator(channelId, msg.sender);
        if (cumulativeAmount > c.claimed) {
            (, uint8 failure) = _claim(channelId, cumulativeAmount, signature);
            if (failure != 0) revert InvalidVoucher(channelId, failure);
        }
        _finish(channelId, c);
    }

    function _claim(bytes32 channelId, uint256 cumulative, bytes calldata signature)
        private
        returns (uint256 amount, uint8 failure)
    {
        Channel storage c = _channels[channelId];
        if (c.payer == address(0)) return (0, FAILURE_NO_CHANNEL);
        if (c.closed) return (0, FAILURE_CLOSED);
        address payee = c.payee;
        if (!_isPayeeOrOperator(payee)) return (0, FAILURE_NOT_PAYEE);
        uint128 claimed = c.claimed;
        if (cumulative > c.deposit) return (0, FAILURE_ABOVE_DEPOSIT);
        if (cumulative <= claimed) return (0, FAILURE_NOTHING_NEW);
        if (!_checkVoucher(c, channelId, cumulative, signature)) return (0, FAILURE_BAD_SIGNATURE);
        amount = cumulative - claimed;
        // Effects before the transfer (nonReentrant guards too); undone if the token refuses.
        c.claimed = uint128(cumulative);
        if (!_tryTransfer(c.token, payee, amount)) {
            c.claimed = claimed;
            return (0, FAILURE_TRANSFER_FAILED);
        }
        emit ChannelClaimed(channelId, payee, cumulative, amount);
    }

    /// r and s in (0, N), then P256VERIFY(sha256 digest, r, s, x, y) returning the word 1.
    function _checkVoucher(Channel storage c, bytes32 channelId, uint256 cumulative, bytes calldata signature)
        private
        view
        returns (bool)
    {
        if (signature.length != 64) return false;
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        if (uint256(r) == 0 || uint256(r) >= P256_N || uint256(s) == 0 || uint256(s) >= P256_N) return false;
        bytes memory input = abi.encode(voucherDigest(channelId, cumulative), r, s, c.sessionKeyX, c.sessionKeyY);
        bool ok;
        uint256 size;
        uint256 word;
        address verifier = P256_VERIFIER;
        assembly ("memory-safe") {
            ok := staticcall(VERIFY_GAS, verifier, add(input, 0x20), 160, 0, 0)
            size := returndatasize()
            if eq(size, 32) {
                returndatacopy(0, 0, 32)
                word := mload(0)
            }
        }
        return ok && size == 32 && word == 1;
    }

    // ---------------------------------------------------------------- close

    /// @notice The payer asks to close; after `closeDelay` seconds anyone may `withdraw` the unclaimed rest to
    /// it. The payee may still claim until then.
    function requestClose(bytes32 channelId) external {
        Channel storage c = _live(channelId);
        if (msg.sender != c.payer) revert NotPayer(channelId, msg.sender);
        _requestClose(channelId, c);
    }

    /// @notice Relayed close request: `signature` is the payer's EIP-712 RequestClose(channelId, deadline).
    /// It needs no nonce: a channel is asked to close once, and a replay reverts CloseAlreadyRequested.
    function requestCloseFor(bytes32 channelId, uint256 deadline, bytes calldata signature) external {
        if (block.timestamp > deadline) revert SignatureExpired(deadline);
        Channel storage c = _live(channelId);
        bytes32 digest = _hashTypedDataV4(keccak256(abi.encode(REQUEST_CLOSE_TYPEHASH, channelId, deadline)));
        if (!SignatureChecker.isValidSignatureNow(c.payer, digest, signature)) revert InvalidSignature();
        _requestClose(channelId, c);
    }

    /// @notice After the close delay: returns the deposit minus what was claimed to the payer and closes the
    /// channel. Anyone may call; the money only goes to the payer.
    function withdraw(bytes32 channelId) external nonReentrant {
        Channel storage c = _live(channelId);
        if (c.closeRequestedAt == 0) revert CloseNotRequested(channelId);
        uint64 closableAt = c.closeRequestedAt + c.closeDelay;
        if (block.timestamp < closableAt) revert CloseDelayNotOver(channelId, closableAt);
        _finish(channelId, c);
    }

    function _requestClose(bytes32 channelId, Channel storage c) private {
        if (c.closeRequestedAt != 0) revert CloseAlreadyRequested(channelId);
        uint64 nowTs = uint64(block.timestamp);
        c.closeRequestedAt = nowTs;
        emit CloseRequested(channelId, nowTs, nowTs + c.closeDelay);
    }

    function _finish(bytes32 channelId, Channel storage c) private {
        uint256 refund = uint256(c.deposit) - c.claimed;
        c.closed = true;
        emit ChannelClosed(channelId, msg.sender, c.claimed, refund);
        if (refund > 0 && !_tryTransfer(c.token, c.payer, refund)) revert TransferFailed(c.token, c.payer, refund);
    }

    // ---------------------------------------------------------------- internals

    function _live(bytes32 channelId) private view returns (Channel storage c) {
        c = _channels[channelId];
        if (c.payer == address(0)) revert ChannelNotFound(channelId);
        if (c.closed) revert ChannelIsClosed(channelId);
    }

    function _isPayeeOrOperator(address payee) private view returns (bool) {
        return msg.sender == payee || isOperator[payee][msg.sender];
    }

    /// Pulls with the token's ReceiveWithAuthorization and checks the contract's balance grew by `amount`.
    function _receive(
        address token,
        address payer,
        uint256 amount,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature
    ) private {
        uint256 before = IERC20(token).balanceOf(address(this));
        IERC3009Receive(token).receiveWithAuthorization(
            payer, address(this), amount, validAfter, validBefore, nonce, signature
        );
        _checkReceived(token, before, amount);
    }

    function _pullFrom(address token, address payer, uint256 amount) private {
        uint256 before = IERC20(token).balanceOf(address(this));
        bytes memory data = abi.encodeCall(IERC20.transferFrom, (payer, address(this), amount));
        if (!_callToken(token, data, gasleft())) revert TransferFailed(token, address(this), amount);
        _checkReceived(token, before, amount);
    }

    /// A deposit counts only what arrived: a token that takes a fee or lies about transfers cannot credit a
    /// channel with money the contract does not hold.
    function _checkReceived(address token, uint256 before, uint256 amount) private view {
        uint256 received = IERC20(token).balanceOf(address(this)) - before;
        if (received != amount) revert DepositNotReceived(amount, received);
    }

    function _tryTransfer(address token, address to, uint256 amount) private returns (bool) {
        return _callToken(token, abi.encodeCall(IERC20.transfer, (to, amount)), TRANSFER_GAS);
    }

    /// A token call whose outcome is reported, never thrown: success is no revert and either no return
    /// data or exactly the word 1. Return data is never copied beyond one word.
    function _callToken(address token, bytes memory data, uint256 gasLimit) private returns (bool) {
        bool success;
        uint256 size;
        uint256 word;
        assembly ("memory-safe") {
            success := call(gasLimit, token, 0, add(data, 0x20), mload(data), 0, 0)
            size := returndatasize()
            if eq(size, 32) {
                returndatacopy(0, 0, 32)
                word := mload(0)
            }
        }
        return success && (size == 0 || (size == 32 && word == 1));
    }
}
